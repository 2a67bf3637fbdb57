"""Which activation routes a fresh interpreter of this Python would take.

Fresh interpreters (spawned workers, torchrun ranks, and the child that lowers
graphs under ``TORCHINDUCTOR_FX_COMPILE_MODE=SUBPROCESS``) get the fix from the
installed routes only: a parent that applied it by ``import inductor_addmm_fix``
or ``install()`` does not hand its patches to them.
"""

from __future__ import annotations

import os

PTH_NAME = "inductor_addmm_fix.pth"


def entry_point_registered() -> bool:
    """Whether a ``torch.backends`` entry point of this package is installed."""
    from importlib.metadata import entry_points

    return any(ep.value.startswith("inductor_addmm_fix.") for ep in entry_points(group="torch.backends"))


def autoload_enabled() -> bool:
    """torch's own test: entry points run only when TORCH_DEVICE_BACKEND_AUTOLOAD is "1" (the default)."""
    return os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") == "1"


def pth_file() -> str | None:
    """The start-up ``.pth`` file in one of this Python's site directories, if any."""
    import site

    folders = list(getattr(site, "getsitepackages", lambda: [])())
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    for folder in folders:
        path = os.path.join(folder, PTH_NAME)
        if os.path.isfile(path):
            return path
    return None


def fresh_interpreters_covered() -> bool:
    return (autoload_enabled() and entry_point_registered()) or pth_file() is not None


def subprocess_compile_requested() -> bool:
    return "SUBPROCESS" in os.environ.get("TORCHINDUCTOR_FX_COMPILE_MODE", "").upper()


def warn_if_subprocess_compile_uncovered(warn) -> None:
    """Under the subprocess compile mode, say so when the child would lack the fix (never raises)."""
    try:
        uncovered = subprocess_compile_requested() and not fresh_interpreters_covered()
    except Exception:  # a report must not stop install()
        return
    if uncovered:
        warn(
            "subprocess-compile",
            "inductor_addmm_fix: active in this process only; with "
            "TORCHINDUCTOR_FX_COMPILE_MODE=SUBPROCESS Inductor lowers in a fresh interpreter "
            "that will not have it. Install the package (pip install) so that its "
            "torch.backends entry point and .pth line activate it there too.",
        )
