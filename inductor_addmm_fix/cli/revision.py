"""Which code runs: the package version, plus the git revision of the checkout the
package runs from, or of the checkout it was built from (a bug report can then name the
commit).

A build from a git checkout (``pip install /path/to/checkout``, ``pip wheel``, an sdist)
records its revision in the package as ``BUILD_REVISION``: ``setup.py`` calls
:func:`record`, loading this file by its path (so it imports nothing of the package).
"""

from __future__ import annotations

import os
import subprocess

#: The file, inside the package, that holds the revision a build was made from.
BUILD_REVISION = "BUILD_REVISION"
PACKAGE = "inductor_addmm_fix"
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../inductor_addmm_fix


def describe(root: str) -> str | None:
    """``git describe --always --dirty`` of the git checkout at ``root`` (``0.2.0-3-g838dfc2a1b``,
    ``838dfc2a1b-dirty`` without tags); None where ``root`` is not the top of a checkout,
    without git, or if git fails in any way (it never raises)."""
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    try:
        result = subprocess.run(
            ["git", "-C", root, "describe", "--always", "--dirty", "--abbrev=10"],
            capture_output=True, text=True, timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    revision = result.stdout.strip()
    return revision if result.returncode == 0 and revision else None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().strip() or None
    except OSError:
        return None


def record(source_root: str, package_dir: str) -> str | None:
    """The build step: write the revision of the checkout at ``source_root`` (or the one
    an sdist unpacked there carries) into ``package_dir/BUILD_REVISION``, and return the
    file's path; where there is none, remove a file left by an earlier build and return None."""
    revision = describe(source_root) or _read(os.path.join(source_root, PACKAGE, BUILD_REVISION))
    target = os.path.join(package_dir, BUILD_REVISION)
    if os.path.lexists(target):
        os.remove(target)  # not written through: it may be a hard link into the source tree
    if revision is None:
        return None
    os.makedirs(package_dir, exist_ok=True)
    with open(target, "w", encoding="utf-8") as file:
        file.write(revision + "\n")
    return target


def git_revision(package_dir: str = _PACKAGE_DIR) -> str | None:
    """The revision of the checkout the package runs from, else the one recorded when it
    was built; None for a build from outside a checkout (never raises)."""
    return describe(os.path.dirname(package_dir)) or _read(os.path.join(package_dir, BUILD_REVISION))


def package_version() -> str:
    """``0.2.0``, or ``0.2.0 (git 838dfc2a1b)`` with a revision."""
    from ..version import __version__

    revision = git_revision()
    return __version__ if revision is None else f"{__version__} (git {revision})"


def version_report() -> dict[str, str | None]:
    """``--version --json``: the keys that ``--json`` status uses for the same facts."""
    from ..version import __version__

    return {"package_version": __version__, "git_revision": git_revision()}
