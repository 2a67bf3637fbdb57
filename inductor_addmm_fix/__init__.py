"""inductor_addmm_fix: matmuls with ``out_dtype=`` compile under torch.compile/Inductor,
and Liger-Kernel's FusedLinearCrossEntropy compiles to eager's memory.

Once the package is installed, its ``torch.backends`` entry point and its ``.pth`` line
apply it in every process with no import; ``import inductor_addmm_fix`` applies it too.
``INDUCTOR_ADDMM_FIX`` selects the features for all three routes (``0``: none,
``1,-slice_writes``: all but one, ``out_dtype``: only that one; see
``activation/selection.py``).
Importing this package never imports torch or Inductor by itself, and imports nothing
heavy: interpreter start-up runs it.

Public API: :func:`install`, :func:`uninstall`, :func:`is_installed`, :func:`status`,
:data:`FEATURES`.
"""

from __future__ import annotations

from .features import NAMES as FEATURES
from .version import __version__

__all__ = ["install", "uninstall", "is_installed", "status", "FEATURES", "__version__", "Status", "PatchStatus"]


def install(features=None) -> "Status":
    """Apply the selected features to this process (None: all of them, whatever
    ``INDUCTOR_ADDMM_FIX`` says).  ``features`` is a spec as the variable takes it
    (``"-slice_writes"``, ``"out_dtype,reinplace"``) or an iterable of names.

    Idempotent and thread-safe: calling it again with another selection rolls back the
    features no longer selected, and retries features that failed.  The parts of a
    feature that a compile uses apply now if the compile's modules are imported
    (``torch._dynamo``, ``torch._inductor.compile_fx``), otherwise as soon as they are.  On a
    torch where a feature cannot be applied, that feature alone is rolled back, with
    one warning; install() never raises."""
    from . import installer

    if not installer.is_wanted():
        from .activation.routes import warn_if_subprocess_compile_uncovered

        warn_if_subprocess_compile_uncovered(installer.warn_once)
    from .activation import selection

    selected_by = "install()" if features is None else f"install(features={features!r})"
    # Unknown words are warned about at the caller's line, not in this package.
    selected = selection.resolve(features, selected_by, stacklevel=2)
    return _reported(installer.install(selected, activation="install()", selected_by=selected_by))


def uninstall() -> "Status":
    """Restore every table entry, kernel and config value the package changed, exactly
    as it was.  Compiled code already cached by Dynamo is not discarded: call
    ``torch._dynamo.reset()`` to recompile without the package."""
    from . import installer
    from .activation import startup

    startup.cancel()
    return _reported(installer.uninstall())


def is_installed() -> bool:
    """Whether the package is active in this process: some features selected and none
    failed (some parts may still wait for the first compile's imports)."""
    from . import installer

    return installer.is_installed()


def status() -> "Status":
    """A structured report: torch version, each feature (applied, off, not needed,
    failed, and why), each patch decision with its probe and the upstream change that
    retires it.  ``str()`` prints it."""
    from . import installer

    return _reported(installer.status())


def _reported(report):
    """The report as ``python -m inductor_addmm_fix`` gives it: its summary line says
    how INDUCTOR_ADDMM_FIX reads, and which setting of it turned every route off."""
    import dataclasses

    from .activation import env
    from .report import headline

    off_by = env.off_by() if report.activation is None else None
    if off_by:
        report = dataclasses.replace(report, features={name: f"off ({off_by})" for name in report.features})
    return dataclasses.replace(report, summary=headline(report, env.switch(), off_by))


def __getattr__(name: str):
    """``Status`` and ``PatchStatus``, loaded on first use (start-up imports no dataclasses)."""
    if name in ("Status", "PatchStatus"):
        from . import report

        return getattr(report, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _activate_on_import() -> None:
    """``import inductor_addmm_fix`` applies the package unless INDUCTOR_ADDMM_FIX says no:
    now if torch is imported, else as soon as it is."""
    from .activation import startup

    startup.activate(startup.IMPORT)


try:
    _activate_on_import()
except Exception as _error:  # pragma: no cover - never break the importing program
    import warnings

    try:
        warnings.warn(f"inductor_addmm_fix: not activated ({type(_error).__name__}: {_error})", RuntimeWarning)
    except Exception:  # -W error: the import must still not fail
        pass
