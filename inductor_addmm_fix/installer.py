"""Applying the selected features to torch, each one its own failure domain.

A feature (``features.py``) is applied in up to three stages (``features.STAGES``): its
``core`` modules as soon as torch is imported, its ``tracing`` modules once
``torch._dynamo`` is, its ``inductor`` modules once ``torch._inductor.compile_fx`` is
(waiting for each with a post-import hook, so that nothing here imports Dynamo or
Inductor: a process that never compiles does not pay for them).  In each stage every
selected feature plans (its modules probe torch and declare their patches), applies
its patches through the one :class:`~.patching.registry.Registry`, and runs the
``self_test()`` of each of its modules of the stage that defines one (what a module
may define: ``patching/protocol.py``).  A failure in any step rolls back that feature, all its
stages, warns once, and leaves the other features as they are; a torch that lacks what
a feature needs, a known limitation, leaves the feature unapplied without a warning.
Shared machinery (the post-grad slot, the cache-key tag) follows the features that
need it, and a failure there fails those features.

Nothing here raises into the caller: a torch we cannot patch only warns.
"""

from __future__ import annotations

import logging
import sys
import threading

from .version import __version__
from . import features as F
from .patching import import_hooks
from .patching.declare import Decision, PlanError, Unavailable, patches_of, plan_modules
from .patching.protocol import FeatureModule, hook, hooks, imported
from .core import table_caches
from .patching.registry import Patch, Registry
from .patching.warn import warn_once
from .report import WAITING, PatchStatus, Status

CORE, TRACING, INDUCTOR = F.STAGES
#: The module whose import completes Inductor's tables; the Inductor stage waits for it.
INDUCTOR_TRIGGER = F.STAGES[INDUCTOR]
#: The stages that wait for an import, in order.
DEFERRED = (TRACING, INDUCTOR)
SHARED = "shared"  # the feature column of machinery in status()

log = logging.getLogger("inductor_addmm_fix")
if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
    log.addHandler(logging.NullHandler())  # quiet unless the program configures logging


class _Applied:
    """What one feature, or one piece of machinery, has done to this process."""

    def __init__(self) -> None:
        self.stages: set[str] = set()  # stages planned and applied
        self.decisions: list[Decision] = []
        self.patches: list[Patch] = []
        self.error: str | None = None  # "Type: message" of the failure that rolled it back
        self.unavailable: str | None = None
        self.needs_off: str | None = None  # a feature it needs that is not applied
        self.key: tuple = ()  # machinery: what it was planned for

    @property
    def off(self) -> bool:
        """Nothing of it is applied, and nothing will be until it is planned again: it
        failed, this torch lacks what it needs, or a feature it needs is off."""
        return bool(self.error or self.unavailable or self.needs_off)


_lock = threading.RLock()
_registry = Registry(after_change=(table_caches.drop,))  # torch's copies of the tables it edits
_state: dict = {"wanted": False, "activation": None, "selected": frozenset(), "selected_by": None}
_features: dict[str, _Applied] = {}
_machinery: dict[str, _Applied] = {}
def is_wanted() -> bool:
    """Whether install() was called (by a route or the user) and uninstall() was not."""
    return _state["wanted"]


def install(selected=None, *, activation: str = "install()", selected_by: str = "install()") -> Status:
    """Apply the selected features (names, as ``activation.selection.resolve`` gives
    them; None: all).  Idempotent and thread-safe; features no longer selected are
    rolled back, and features that failed (or found this torch lacking) are planned
    again."""
    with _lock:
        selected = frozenset(F.NAMES) if selected is None else frozenset(n for n in selected if n in F.BY_NAME)
        if not _state["wanted"]:
            _state.update(wanted=True, activation=activation)
        for name in [n for n in _features if n not in selected]:
            _restore(_features.pop(name))
        for feature in F.FEATURE_TABLE:  # a feature built on one rolled back goes with it
            if feature.name in _features and any(n not in _features for n in feature.needs):
                _restore(_features[feature.name])
                _features[feature.name] = _Applied()
        _state.update(selected=selected, selected_by=selected_by)
        for name in selected:
            applied = _features.setdefault(name, _Applied())
            if applied.off:  # plan it again
                _features[name] = _Applied()
        _apply_stage(CORE)  # imports torch, inside the guard: a torch we cannot patch only warns
        for stage in DEFERRED:  # in order: a hook whose module is imported runs now
            if any(_waits_for(name, stage) for name in selected):
                import_hooks.when_imported(F.STAGES[stage], _APPLY[stage])
        if INDUCTOR_TRIGGER in sys.modules:
            _sync_machinery()
        return status()


def uninstall() -> Status:
    """Restore every slot the package changed, exactly as it was."""
    with _lock:
        for stage in DEFERRED:
            import_hooks.cancel(F.STAGES[stage])
        for problem in _registry.restore():
            warn_once(f"restore:{problem}", f"inductor_addmm_fix: {problem}")
        _features.clear()
        _machinery.clear()
        _state.update(wanted=False, activation=None, selected=frozenset(), selected_by=None)
        return status()


def _waits_for(name: str, stage: str) -> bool:
    """Whether feature ``name`` is selected, not failed, and its ``stage`` waits for its import."""
    applied = _features.get(name)
    return (
        applied is not None
        and not applied.off
        and bool(getattr(F.BY_NAME[name], stage))
        and stage not in applied.stages
    )


def waiting_for(name: str) -> str | None:
    """The module whose import the next stage of feature ``name`` waits for, if any."""
    return next((F.STAGES[stage] for stage in DEFERRED if _waits_for(name, stage)), None)


def _apply_tracing_stage() -> None:
    _apply_deferred_stage(TRACING)


def _apply_inductor_stage() -> None:
    _apply_deferred_stage(INDUCTOR)


_APPLY = {TRACING: _apply_tracing_stage, INDUCTOR: _apply_inductor_stage}


def _apply_deferred_stage(stage: str) -> None:
    """A stage run by its post-import hook: maybe inside a call of the user's (the first
    eager call of a kernel that imports torch._dynamo), so the probes run without the
    dispatch modes active there.  A later stage whose module is imported already, and
    done executing (an import order torch does not have today), follows at once; one
    whose module is still executing waits for its own hook."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _lock, _disable_current_modes():
        _apply_stage(stage)
        for later in DEFERRED[DEFERRED.index(stage) + 1 :]:
            module = sys.modules.get(F.STAGES[later])
            if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
                _apply_stage(later)


def _apply_stage(stage: str) -> None:
    with _lock:
        if not _state["wanted"]:
            return
        earlier = list(F.STAGES)[: list(F.STAGES).index(stage)]
        for feature in F.FEATURE_TABLE:
            applied = _features.get(feature.name)
            if applied is None or applied.off or stage in applied.stages:
                continue
            if any(getattr(feature, e) and e not in applied.stages for e in earlier):
                continue  # an earlier part is not applied yet: its hook comes first
            off = [n for n in feature.needs if not _applied_at(n, stage)]
            if off:
                _restore(applied)
                applied.needs_off = off[0]
                continue
            _remove_standins(applied, feature.standins.get(stage, ()))
            try:
                decisions = plan_modules(getattr(feature, stage))
                patches = patches_of(decisions)
                _registry.apply(patches)
                applied.patches += patches
                for self_test in hooks(getattr(feature, stage), FeatureModule.self_test):
                    self_test()
            except Unavailable as reason:
                _restore(applied)
                applied.unavailable = str(reason)
                continue
            except Exception as error:  # never let a feature break torch or the program
                _fail(feature.name, error)
                continue
            applied.decisions += decisions
            applied.stages.add(stage)
            log.info("%s: applied %d %s patch(es)", feature.name, len(patches), stage)
        if stage == INDUCTOR:
            _sync_machinery()


def _remove_standins(applied: _Applied, modules) -> None:
    """Take away the patches of ``modules``, which stood in for the stage that begins
    (``Feature.standins``): its probes must see torch's own kernels."""
    if not modules:
        return

    def of(name: str) -> bool:
        return any(name == m or name.startswith(f"{m}.") for m in modules)

    for problem in _registry.restore(only=[p for p in applied.patches if of(p.name)]):
        warn_once(f"restore:{problem}", f"inductor_addmm_fix: {problem}")
    applied.patches = [p for p in applied.patches if not of(p.name)]
    applied.decisions = [d for d in applied.decisions if not of(d.name)]


def _applied_at(name: str, stage: str) -> bool:
    """Whether feature ``name`` is selected and its ``stage`` applied (or has nothing to apply)."""
    applied = _features.get(name)
    if applied is None or applied.off:
        return False
    return stage in applied.stages or not getattr(F.BY_NAME[name], stage)


def _applied_reports(member) -> dict[str, str]:
    """Per applied feature, what the ``member`` hook (``FeatureModule.settings``) of
    each of its modules that defines one says, where that is not None (joined by "; ";
    a status never raises for it)."""
    out = {}
    for name, state in status().features.items():
        if state != "applied":
            continue
        said = []
        for module in F.BY_NAME[name].modules:
            try:
                function = hook(imported(module), member)
                said.append(function() if function is not None else None)
            except Exception as error:
                said.append(f"cannot tell ({type(error).__name__}: {error})")
        if any(said):
            out[name] = "; ".join(s for s in said if s)
    return out


def idle_here() -> dict[str, str]:
    """The applied features that cannot act in this process (a kernel for hardware not
    present), each with why."""
    return _applied_reports(FeatureModule.idle_here)


def settings() -> dict[str, str]:
    """The applied features that a setting changes from their default, each with what is
    set."""
    return _applied_reports(FeatureModule.settings)


def _restore(applied: _Applied) -> None:
    for problem in _registry.restore(only=applied.patches):
        warn_once(f"restore:{problem}", f"inductor_addmm_fix: {problem}")
    applied.patches, applied.decisions, applied.stages = [], [], set()


def _fail(name: str, error: BaseException) -> None:
    """Roll back every stage of one feature and warn once; the others stay."""
    applied = _features[name]
    _restore(applied)
    applied.error = f"{type(error).__name__}: {error}"
    warn_once(
        f"feature:{name}",
        f"inductor_addmm_fix: the {name} feature could not be applied to this torch, so it is off "
        f"and torch was left as it was for it; other features are not affected ({applied.error})",
    )


def _sync_machinery() -> None:
    """Apply, re-plan or remove each piece of shared machinery for the features now
    applied that need it.  A failure fails those features, which may change what the
    other machinery serves: repeat until nothing changes."""
    changed = True
    while changed:
        changed = False
        for machinery, module in F.MACHINERY.items():
            users = {
                f.name: sorted(p.name for p in _features[f.name].patches)
                for f in F.FEATURE_TABLE
                if machinery in f.machinery
                and f.name in _features
                and INDUCTOR in _features[f.name].stages
                and _features[f.name].patches
            }
            key = tuple((name, tuple(patches)) for name, patches in users.items())
            current = _machinery.get(machinery)
            if current is not None and current.key == key:
                continue
            if current is not None:
                _restore(_machinery.pop(machinery))
            if not users:
                continue
            applied = _Applied()
            try:
                applied.decisions = plan_modules([module], users, __version__)
                applied.patches = patches_of(applied.decisions)
                _registry.apply(applied.patches)
            except Exception as error:
                failure = PlanError(f"{machinery}: {type(error).__name__}: {error}")
                for name in users:
                    _fail(name, failure)
                changed = True
                break
            applied.key = key
            _machinery[machinery] = applied


def applied_patches() -> list[Patch]:
    """Every patch applied now, in the order applied."""
    return _registry.applied()


def is_installed() -> bool:
    with _lock:
        selected = _state["selected"]
        return _state["wanted"] and bool(selected) and not any(_features[n].error for n in selected if n in _features)


def status() -> Status:
    import torch

    with _lock:
        states, patches = {}, []
        for feature in F.FEATURE_TABLE:
            name = feature.name
            applied = _features.get(name)
            if not _state["wanted"]:
                states[name] = "not installed"
            elif name not in _state["selected"] or applied is None:
                states[name] = f"off ({_state['selected_by']})"
            elif applied.error:
                states[name] = f"failed: {applied.error}"
            elif applied.unavailable:
                states[name] = f"unavailable on this torch: {applied.unavailable}"
            elif applied.needs_off:
                states[name] = f"off (needs the {applied.needs_off} feature, which is not applied)"
            elif waiting_for(name):
                states[name] = f"{WAITING} (when {waiting_for(name)} is imported)"
            elif any(d.needed for d in applied.decisions):
                states[name] = "applied"
            else:
                states[name] = "not needed on this torch"
            if applied is not None:
                patches += [_patch_status(d, name) for d in applied.decisions]
        for applied in _machinery.values():
            patches += [_patch_status(d, SHARED) for d in applied.decisions]
        return Status(
            package_version=__version__,
            torch_version=str(torch.__version__),
            installed=is_installed(),
            activation=_state["activation"],
            features=states,
            patches=tuple(patches),
        )


def _patch_status(d: Decision, feature: str) -> PatchStatus:
    return PatchStatus(d.name, feature, d.needed, d.reason, d.probe, d.obsolete_when)
