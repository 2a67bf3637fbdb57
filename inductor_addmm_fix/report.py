"""The report that :func:`inductor_addmm_fix.status` returns, and its one-line summary
(kept apart so that importing the package at interpreter start-up does not import
``dataclasses``)."""

from __future__ import annotations

import dataclasses
from typing import Any

#: How a feature's state begins while a stage of it waits for the import of a part of
#: torch that a compile imports (``torch._dynamo``, ``torch._inductor.compile_fx``).
WAITING = "applies at first compile"
#: The feature that is the fix itself: matmuls with out_dtype= compile.
FIX = "out_dtype"
#: The states of a feature that is on.
ON_STATES = ("applied", "not needed on this torch", WAITING)


@dataclasses.dataclass(frozen=True)
class PatchStatus:
    """One decision of a patch module: applied or not, and why."""

    name: str
    feature: str  # the feature it belongs to, or "shared" (machinery of several features)
    applied: bool
    reason: str
    probe: str  # the probe of the installed torch that decided
    obsolete_when: str  # the upstream change that retires it


@dataclasses.dataclass(frozen=True)
class Status:
    package_version: str
    torch_version: str
    installed: bool  # every selected feature applied, waiting for its first compile, or not needed
    activation: str | None
    #: feature -> "applied" | "applies at first compile (when <module> is imported)" | "not
    #: needed on this torch" | "unavailable on this torch: ..." | "off (...)" | "failed: ..." |
    #: "not installed"
    features: dict[str, str]
    patches: tuple[PatchStatus, ...]
    #: One line: "fix active (...)", "fix applies at first compile (...)", "fix partly
    #: active (...)" or "fix NOT active...": what ``python -m inductor_addmm_fix`` prints.
    summary: str = ""

    @property
    def waiting(self) -> tuple[str, ...]:
        """The features a stage of which waits for the first compile's imports."""
        return tuple(name for name, state in self.features.items() if state.startswith(WAITING))

    @property
    def active(self) -> bool:
        """Whether the fix itself (the out_dtype feature) is on: applied, not needed, or
        applying at the first compile."""
        return self.features.get(FIX, "").startswith(ON_STATES)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        # The words of ``python -m inductor_addmm_fix`` (``cli.status``).
        lines = [
            f"inductor_addmm_fix {self.package_version} on torch {self.torch_version}",
            self.summary or headline(self),
        ]
        width = max(map(len, self.features), default=0)
        lines += [f"  {feature:<{width}}  {state}" for feature, state in self.features.items()]
        for p in self.patches:
            mark = "applied" if p.applied else "not needed"
            lines.append(f"  [{mark:>10}] {p.name}: {p.reason}")
        return "\n".join(lines)


def headline(report: Status, switch: str = "", off_by: str | None = None) -> str:
    """The summary line of a report.  ``switch``: how the environment variable reads
    (``"; INDUCTOR_ADDMM_FIX=-views"``), added to the activation; ``off_by``: the
    variable's setting that turned every route off (``"INDUCTOR_ADDMM_FIX=0"``)."""
    if off_by:
        return f"fix NOT active: turned off by {off_by}"
    states = report.features
    failed = [name for name, state in states.items() if state.startswith("failed")]
    how = f"activated by {report.activation}{switch}"
    if report.activation is None:
        return "fix NOT active: not activated (reinstall the package, or import inductor_addmm_fix)"
    if not any(state.startswith(ON_STATES) for state in states.values()) and not failed:
        return f"fix NOT active ({how}): no feature selected"
    fix_state = states.get(FIX, "")
    if not fix_state.startswith(ON_STATES):
        others = [name for name in failed if name != FIX]
        return f"fix NOT active ({how}): {FIX} {_short(fix_state)}" + (f"; {', '.join(others)} failed" if others else "")
    if failed:
        return f"fix partly active ({how}): {', '.join(failed)} failed"
    if report.waiting:
        return f"fix {WAITING} ({how})"
    return f"fix active ({how})"


def _short(state: str) -> str:
    """``off``, ``failed``, ``unavailable on this torch``: a feature's state without its why."""
    return state.split(" (")[0].split(":")[0]
