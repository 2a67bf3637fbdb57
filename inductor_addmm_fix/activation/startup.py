"""The activation routes: how the package gets applied with no change to user code.

* ``torch.backends`` entry point: torch calls :func:`entry_point` at the end of
  ``import torch`` (unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``).
* ``inductor_addmm_fix.pth``: at interpreter start-up its line checks
  INDUCTOR_ADDMM_FIX, then calls :func:`from_pth`, which waits for torch.
* ``import inductor_addmm_fix`` (the package calls :func:`activate` itself).

Every route goes through :func:`activate`: gated by INDUCTOR_ADDMM_FIX as set when
torch is imported (the ``.pth`` line reads it first too, to import nothing when off),
which also selects the features (``selection.resolve``, the one parser); idempotent (several routes fire in one process; the
first to install names the activation); cheap until torch is imported (no torch, no
``logging``); and it never raises: a failure becomes one warning.  Raising here would
break ``import torch``.
"""

from __future__ import annotations

import sys

IMPORT = "import"
ENTRY_POINT = "entry-point"
PTH = ".pth"

_waiting: str | None = None  # the route that waits for torch to be imported
_hooked = False  # a post-import hook on torch is registered
_warned = False


def entry_point() -> None:
    """The ``torch.backends`` entry point: torch calls it while ``import torch`` runs."""
    activate(ENTRY_POINT)


def from_pth() -> None:
    """Called by the ``.pth`` line at interpreter start-up."""
    activate(PTH)


def activate(route: str) -> None:
    """Apply the package now if torch is imported, else right after ``import torch``."""
    try:
        from .env import enabled_by_env

        if not enabled_by_env():
            return
        torch = sys.modules.get("torch")
        if torch is None:
            _wait_for_torch(route)
            return
        if route == IMPORT and _still_importing(torch):
            # Only torch's backend autoload imports this package from inside
            # ``import torch``: our entry point is on its way.
            route = ENTRY_POINT
        _install(route)
    except Exception as error:  # never break start-up or ``import torch``
        _warn(route, error)


def cancel() -> None:
    """Forget a route that waits for torch (``uninstall()`` before torch is imported)."""
    global _waiting
    _waiting = None


def _still_importing(module) -> bool:
    """Whether ``module`` is still executing its import (the flag importlib sets)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _wait_for_torch(route: str) -> None:
    global _waiting, _hooked
    # The .pth line imports the package (whose import asks as "import"), then asks as
    # ".pth": the later request names the activation.
    _waiting = route
    if not _hooked:
        _hooked = True
        from ..patching import import_hooks

        import_hooks.when_imported("torch", _on_torch_imported)


def _on_torch_imported() -> None:
    global _waiting, _hooked
    route, _waiting, _hooked = _waiting, None, False
    if route is None:  # cancelled
        return
    try:
        _install(route)
    except Exception as error:
        _warn(route, error)


def _install(route: str) -> None:
    from .. import installer
    from . import env, selection

    # Read again: sitecustomize or the program may have set it since start-up.
    if installer.is_wanted() or not env.enabled_by_env():  # wanted: installed, or install() is importing torch
        return
    if route == IMPORT:
        from .routes import warn_if_subprocess_compile_uncovered

        warn_if_subprocess_compile_uncovered(installer.warn_once)
    # Unknown words of the variable are warned about pointing at the variable, not at this code.
    selected = selection.resolve(env.value(), env.selected_by(), filename=env.WHERE)
    installer.install(selected, activation=route, selected_by=env.selected_by())


def warn(message: str, *, filename: str | None = None, lineno: int = 1, stacklevel: int = 1) -> None:
    """A RuntimeWarning that never raises.  Where warning filters make it an exception
    (``python -W error``), start-up and ``import torch`` must still go on: the message
    goes to stderr as one line instead.  ``filename``/``lineno`` (``warn_explicit``) say
    where it points; else ``stacklevel`` counts as for ``warnings.warn`` from the caller."""
    import warnings

    try:
        if filename is None:
            warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)
        else:
            warnings.warn_explicit(message, RuntimeWarning, filename, lineno, module="inductor_addmm_fix")
    except Exception:
        try:
            sys.stderr.write(f"{message} [RuntimeWarning, not raised]\n")
        except Exception:
            pass


def _warn(route: str, error: BaseException) -> None:
    """One warning per process for a start-up failure, whatever the route."""
    global _warned
    if _warned:
        return
    _warned = True
    message = f"inductor_addmm_fix: not activated by {route} ({type(error).__name__}: {error})"
    try:
        from ..installer import warn_once

        warn_once("startup", message)
    except Exception:
        warn(message)
