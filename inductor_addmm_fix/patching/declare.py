"""How a patch module declares its patches, and how declarations are collected.

Every patch module (``core/``, ``inductor/``, ...) has a module-level ``plan()`` next
to its code (what else it may define: ``protocol.py``).  It probes the installed torch and returns one :class:`Decision` per thing
it may patch: needed or not, why, the probe that decided, the upstream change that
retires it, and the :class:`~.registry.Patch` objects to apply.  A probe that finds
torch shaped unlike anything we know raises :class:`PlanError` (the feature fails and
warns once); a torch that lacks what a feature needs, a known limitation, raises
:class:`Unavailable` (the feature is not applied, silently).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

from .protocol import imported
from .registry import Patch

_PACKAGE = __name__.rsplit(".", 2)[0]  # "inductor_addmm_fix"


class PlanError(RuntimeError):
    """The installed torch does not look like any release we know how to patch."""


class Unavailable(Exception):
    """This torch lacks what the patch needs (a known limitation, not a failure)."""


@dataclasses.dataclass
class Decision:
    """One thing a module may patch, and what the probes of this torch decided."""

    name: str  # stable id, e.g. "inductor.lowering.addmm.dtype"
    needed: bool
    reason: str  # what is broken in this torch, or why nothing is
    probe: str  # the probe that decided, e.g. "core.probes.meta_kernel_works"
    obsolete_when: str  # the upstream change that retires the patch
    patches: list[Patch] = dataclasses.field(default_factory=list)


def probe_name(probe: Callable[..., Any] | str) -> str:
    """``core.probes.meta_kernel_works`` for that function (a string stays as it is)."""
    if isinstance(probe, str):
        return probe
    module = probe.__module__.removeprefix(_PACKAGE + ".")
    return f"{module}.{probe.__qualname__}"


def needed(name: str, reason: str, patches: list[Patch], *, probe, obsolete_when: str) -> Decision:
    return Decision(name, True, reason, probe_name(probe), obsolete_when, list(patches))


def not_needed(name: str, reason: str, *, probe, obsolete_when: str) -> Decision:
    return Decision(name, False, reason, probe_name(probe), obsolete_when)


def per_op(prefix: str, ops: Iterable[str], overloads: Iterable[str], lacks: Callable[[str], bool],
           patch_for: Callable[[str], Patch], *, reasons: tuple[str, str], probe, obsolete_when: str) -> list[Decision]:
    """One decision per op, ``<prefix>.<op>.dtype``: needed, with ``patch_for(qualname)``
    for each of its overloads ``<op>.<overload>`` that ``lacks``, else not needed.
    ``reasons``: (needed, not needed)."""
    overloads = tuple(overloads)
    decisions = []
    for op in ops:
        lacking = [f"{op}.{which}" for which in overloads if lacks(f"{op}.{which}")]
        name = f"{prefix}.{op}.dtype"
        if lacking:
            patches = [patch_for(qualname) for qualname in lacking]
            decisions.append(needed(name, reasons[0], patches, probe=probe, obsolete_when=obsolete_when))
        else:
            decisions.append(not_needed(name, reasons[1], probe=probe, obsolete_when=obsolete_when))
    return decisions


def require(condition: bool, what: str) -> None:
    """Raise :class:`PlanError` unless this torch has ``what``."""
    if not condition:
        import torch

        raise PlanError(f"this torch ({torch.__version__}) has no {what}")


def plan_modules(modules: Iterable[str], *args: Any) -> list[Decision]:
    """The decisions of the named patch modules (``"inductor.lowerings"``), in order.

    Importing a module imports the part of torch it patches: a torch unlike any we
    know fails here, inside the caller's guard."""
    decisions: list[Decision] = []
    for name in modules:
        decisions += imported(name).plan(*args)
    return decisions


def patches_of(decisions: Iterable[Decision]) -> list[Patch]:
    return [p for d in decisions if d.needed for p in d.patches]
