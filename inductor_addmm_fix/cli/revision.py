"""Which code runs: the package version, plus the git revision when the package is
imported from a git checkout (a bug report can then name the commit)."""

from __future__ import annotations

import os
import subprocess

from ..version import __version__


def git_revision() -> str | None:
    """``git describe --always --dirty`` of the checkout the package runs from
    (``0.2.0-3-g838dfc2a1b-dirty``, or a bare hash without tags); None for an installed
    wheel, without git, or if git fails in any way (it never raises)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../inductor_addmm_fix
    root = os.path.dirname(root)
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


def package_version() -> str:
    """``0.2.0``, or ``0.2.0 (git 838dfc2a1b)`` from a checkout."""
    revision = git_revision()
    return __version__ if revision is None else f"{__version__} (git {revision})"
