"""The report that :func:`inductor_addmm_fix.status` returns (kept apart so that
importing the package at interpreter start-up does not import ``dataclasses``)."""

from __future__ import annotations

import dataclasses
from typing import Any

#: A feature's state while its Inductor stage waits for ``torch._inductor.compile_fx``.
WAITING = "waiting for torch._inductor to be imported"


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
    installed: bool  # every selected feature applied, waiting for Inductor, or not needed
    activation: str | None
    #: feature -> "applied" | "waiting for torch._inductor to be imported" | "not needed on this
    #: torch" | "unavailable on this torch: ..." | "off (...)" | "failed: ..." | "not installed"
    features: dict[str, str]
    patches: tuple[PatchStatus, ...]

    @property
    def waiting(self) -> tuple[str, ...]:
        """The features whose Inductor stage waits for torch._inductor to be imported."""
        return tuple(name for name, state in self.features.items() if state == WAITING)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        # The words of ``python -m inductor_addmm_fix`` (``cli.status``).
        if not self.installed:
            summary = "fix NOT active"
        elif self.waiting:
            summary = "fix waiting for torch._inductor"
        else:
            summary = "fix active"
        lines = [
            f"inductor_addmm_fix {self.package_version} on torch {self.torch_version}",
            summary + (f" (activated by {self.activation})" if self.activation else ""),
        ]
        lines += [f"  {feature:<13} {state}" for feature, state in self.features.items()]
        for p in self.patches:
            mark = "applied" if p.applied else "not needed"
            lines.append(f"  [{mark:>10}] {p.name}: {p.reason}")
        return "\n".join(lines)
