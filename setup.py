"""Metadata lives in pyproject.toml; this file only ships ``inductor_addmm_fix.pth``
at the top of the wheel, i.e. at the top of site-packages, where Python runs it
at every start-up (see inductor_addmm_fix/activation/startup.py)."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "inductor_addmm_fix.pth"


class build_py_with_pth(build_py):
    """build_py, plus the start-up ``.pth`` file at the root of build_lib."""

    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": build_py_with_pth})
