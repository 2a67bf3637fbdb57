"""inductor_addmm_fix: matmuls with ``out_dtype=`` compile under torch.compile/Inductor.

``import inductor_addmm_fix`` applies the fix (unless ``INDUCTOR_ADDMM_FIX=0``); once
the package is installed, its ``torch.backends`` entry point and its ``.pth`` line
apply it with no import at all (see ``_startup``).  Tier 1 (core decompositions and
meta kernels) applies as soon as torch is imported; Tier 2 (Inductor's decomposition
and lowering tables) as soon as Inductor is imported: importing this package never
imports torch or Inductor by itself, and imports nothing heavy (start-up runs it).

Public API: :func:`install`, :func:`uninstall`, :func:`is_installed`, :func:`status`.
"""

from __future__ import annotations

import _thread

__version__ = "0.1.0"
__all__ = ["install", "uninstall", "is_installed", "status", "Status", "PatchStatus"]

#: The module whose import completes Inductor's tables; Tier 2 waits for it.
INDUCTOR_TRIGGER = "torch._inductor.compile_fx"

_lock = _thread.RLock()
_state: dict[str, object] = {
    "wanted": False,  # install() was called and uninstall() was not
    "activation": None,  # how the fix was activated: "import", "entry-point", ".pth", "install()"
    "decisions": {},  # tier -> list[Decision]
    "errors": {},  # tier -> message of the failure that left that tier untouched
}
_warned: set[str] = set()
_the_registry = None


def _get_registry():
    global _the_registry
    if _the_registry is None:
        from ._registry import Registry

        _the_registry = Registry(after_change=[_clear_caches])
    return _the_registry


def _clear_caches() -> None:
    """Drop torch's copies of the tables we edit (called after every change)."""
    import sys

    decomposition = sys.modules.get("torch._inductor.decomposition")
    fast = getattr(decomposition, "fast_random_decomps", None)
    if hasattr(fast, "cache_clear"):
        fast.cache_clear()
    fake_tensor = sys.modules.get("torch._subclasses.fake_tensor")
    check = getattr(fake_tensor, "torch_decomp_decompositions", None)
    if hasattr(check, "cache_clear"):
        check.cache_clear()
    mode = getattr(fake_tensor, "FakeTensorMode", None)
    cache = getattr(mode, "cache", None)
    if isinstance(cache, dict):
        cache.clear()


def _logger():
    """The package's logger, quiet by default (a NullHandler); made on first use so
    that interpreter start-up does not import ``logging``."""
    import logging

    logger = logging.getLogger(__name__)
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    return logger


def __getattr__(name: str):
    """``Status``, ``PatchStatus`` and ``log``, loaded on first use."""
    if name in ("Status", "PatchStatus"):
        from . import _status

        return getattr(_status, name)
    if name == "log":
        return _logger()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _warn_once(key: str, message: str) -> None:
    import warnings

    _logger().warning("%s", message)
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _apply_tier(tier: str) -> None:
    """Plan and apply one tier.  The fix is all or nothing: if any tier fails, every
    patch of every tier is restored, torch is left as it was, and we warn once."""
    with _lock:
        if not _state["wanted"] or tier in _state["decisions"] or _state["errors"]:
            return
        registry = _get_registry()
        try:
            from . import _plan  # imports torch: a torch unlike any we know fails here

            if tier == _plan.CORE:
                decisions = _plan.plan_core()
            else:
                decisions = _plan.plan_inductor(__version__)
            patches = [p for d in decisions if d.needed for p in d.patches]
            registry.apply(patches)
            if tier == _plan.CORE:
                _self_test_core()
        except Exception as error:  # never let the fix break torch or the program
            _give_up(tier, error)
            return
        _state["decisions"][tier] = decisions
        _logger().info("applied %d %s patch(es)", len(patches), tier)


def _give_up(tier: str, error: Exception) -> None:
    """Restore every patch (all tiers), stop waiting for Inductor, warn once."""
    from . import _import_hooks

    _import_hooks.cancel(INDUCTOR_TRIGGER)
    rolled_back = sorted(_state["decisions"])
    problems = _get_registry().restore()
    _state["decisions"] = {}
    _state["errors"][tier] = f"{type(error).__name__}: {error}"
    also = f" (the {', '.join(rolled_back)} patches were rolled back too)" if rolled_back else ""
    _warn_once(
        f"tier:{tier}",
        f"inductor_addmm_fix: the {tier} patches could not be applied to torch, so the fix is off "
        f"and torch was left as it was{also} ({type(error).__name__}: {error})",
    )
    for problem in problems:
        _warn_once(f"restore:{problem}", f"inductor_addmm_fix: {problem}")


def _self_test_core() -> None:
    """After Tier 1, every family op must run on meta tensors and give out_dtype."""
    from . import _plan, _torch_features

    broken = [n for n in _torch_features.FAMILY if not _torch_features.meta_kernel_works(n)]
    if broken:
        raise _plan.PlanError(
            "self-test failed after patching: " + ", ".join(f"{n}.dtype" for n in broken) + " still fail on meta tensors"
        )
    lax = {n: _torch_features.meta_kernel_accepts(n) for n in _torch_features.FAMILY}
    lax = {n: problems for n, problems in lax.items() if problems}
    if lax:
        raise _plan.PlanError(
            "self-test failed after patching: "
            + "; ".join(f"{n}.dtype still accepts {', '.join(p)}" for n, p in lax.items())
        )


def _apply_inductor_tier() -> None:
    from ._plan import INDUCTOR

    _apply_tier(INDUCTOR)


def install(*, activation: str = "install()") -> "Status":
    """Apply the fix to this process.  Idempotent and thread-safe.  Tier 2 is
    applied now if Inductor is imported, otherwise as soon as it is.

    All or nothing: on a torch it cannot patch (internals missing or renamed, a
    self-test failing) it warns once, restores whatever it had applied, Tier 1
    included if Tier 2 fails later, and never raises.  Calling it again retries."""
    from . import _import_hooks

    _logger()  # the NullHandler, before any of our modules logs
    with _lock:
        if not _state["wanted"]:
            _state["wanted"] = True
            _state["activation"] = activation
            if activation in ("import", "install()"):
                from ._routes import warn_if_subprocess_compile_uncovered

                warn_if_subprocess_compile_uncovered(_warn_once)
        _state["errors"] = {}  # a failed attempt left torch as it was: try again
        _apply_tier("core")  # imports torch, inside the guard: a torch we cannot patch only warns
        if "core" in _state["decisions"]:
            _import_hooks.when_imported(INDUCTOR_TRIGGER, _apply_inductor_tier)
        return status()


def uninstall() -> "Status":
    """Restore every table entry and kernel this package changed, exactly as it was.

    Compiled code already cached by Dynamo is not discarded: call
    ``torch._dynamo.reset()`` to recompile without the fix."""
    from . import _import_hooks, _startup

    with _lock:
        _startup.cancel()
        _import_hooks.cancel(INDUCTOR_TRIGGER)
        problems = _get_registry().restore()
        for problem in problems:
            _warn_once(f"restore:{problem}", f"inductor_addmm_fix: {problem}")
        _state.update(wanted=False, activation=None, decisions={}, errors={})
        return status()


def is_installed() -> bool:
    """Whether the fix is active in this process (Tier 2 may still wait for Inductor)."""
    with _lock:
        return _state["wanted"] and "core" in _state["decisions"] and not _state["errors"]


def status() -> "Status":
    """A structured report: torch version, each tier and each patch, applied or not and why."""
    import torch

    from . import _import_hooks
    from ._status import PatchStatus, Status

    with _lock:
        tiers = {}
        patches = []
        for tier in ("core", "inductor"):
            if tier in _state["errors"]:
                tiers[tier] = f"failed: {_state['errors'][tier]}"
            elif _state["errors"]:
                tiers[tier] = "not applied: another tier failed and the fix is all or nothing"
            elif tier in _state["decisions"]:
                tiers[tier] = "applied"
                patches += [
                    PatchStatus(d.name, d.tier, d.needed, d.reason, d.obsolete_when)
                    for d in _state["decisions"][tier]
                ]
            elif _state["wanted"] and _import_hooks.is_pending(INDUCTOR_TRIGGER):
                tiers[tier] = "waiting for torch._inductor to be imported"
            else:
                tiers[tier] = "not installed"
        return Status(
            package_version=__version__,
            torch_version=str(torch.__version__),
            installed=is_installed(),
            activation=_state["activation"],
            tiers=tiers,
            patches=tuple(patches),
        )


def _auto_install() -> None:
    """``import inductor_addmm_fix`` applies the fix unless INDUCTOR_ADDMM_FIX says no:
    now if torch is imported, else as soon as it is."""
    from . import _startup

    _startup.activate(_startup.IMPORT)


try:
    _auto_install()
except Exception as _error:  # pragma: no cover - never break the importing program
    _warn_once("import", f"inductor_addmm_fix: not activated ({type(_error).__name__}: {_error})")
