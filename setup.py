"""Metadata lives in pyproject.toml.  This file ships ``inductor_addmm_fix.pth`` at the top
of the wheel, i.e. at the top of site-packages, where Python runs it at every start-up
(see inductor_addmm_fix/activation/startup.py), and records the git revision a build is
made from in ``inductor_addmm_fix/BUILD_REVISION`` (``python -m inductor_addmm_fix
--version`` reports it; see inductor_addmm_fix/cli/revision.py)."""

import importlib.util
import os

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
PTH = "inductor_addmm_fix.pth"
PACKAGE = "inductor_addmm_fix"


def _revision():
    """inductor_addmm_fix/cli/revision.py, loaded by its path: the package is not imported."""
    spec = importlib.util.spec_from_file_location("_build_revision", os.path.join(HERE, PACKAGE, "cli", "revision.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class build_py_with_pth(build_py):
    """build_py, plus the start-up ``.pth`` file at the root of build_lib and the revision."""

    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH), preserve_mode=False)
        _revision().record(HERE, os.path.join(self.build_lib, PACKAGE))

    def get_outputs(self, include_bytecode=True):
        outputs = [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]
        revision = os.path.join(self.build_lib, PACKAGE, _revision().BUILD_REVISION)
        return outputs + ([revision] if os.path.exists(revision) else [])


class sdist_with_revision(sdist):
    """sdist, with the revision in the source tree it packs (a wheel built from it has no git)."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        _revision().record(HERE, os.path.join(base_dir, PACKAGE))


setup(cmdclass={"build_py": build_py_with_pth, "sdist": sdist_with_revision})
