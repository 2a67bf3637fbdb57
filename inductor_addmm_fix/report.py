"""The report that :func:`inductor_addmm_fix.status` returns (kept apart so that
importing the package at interpreter start-up does not import ``dataclasses``)."""

from __future__ import annotations

import dataclasses
from typing import Any


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

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        lines = [
            f"inductor_addmm_fix {self.package_version} on torch {self.torch_version}",
            # The words of ``python -m inductor_addmm_fix`` (``cli.status``).
            ("fix active" if self.installed else "fix NOT active")
            + (f" (activated by {self.activation})" if self.activation else ""),
        ]
        lines += [f"  {feature:<13} {state}" for feature, state in self.features.items()]
        for p in self.patches:
            mark = "applied" if p.applied else "not needed"
            lines.append(f"  [{mark:>10}] {p.name}: {p.reason}")
        return "\n".join(lines)
