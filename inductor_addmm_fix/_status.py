"""The report that :func:`inductor_addmm_fix.status` returns (kept apart so that
importing the package at interpreter start-up does not import ``dataclasses``)."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class PatchStatus:
    name: str
    tier: str
    applied: bool
    reason: str
    obsolete_when: str


@dataclasses.dataclass(frozen=True)
class Status:
    package_version: str
    torch_version: str
    installed: bool
    activation: str | None
    tiers: dict[str, str]  # tier -> "applied" | "waiting for ..." | "failed: ..." | "not applied: ..." | "not installed"
    patches: tuple[PatchStatus, ...]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        lines = [
            f"inductor_addmm_fix {self.package_version} on torch {self.torch_version}",
            f"installed: {'yes' if self.installed else 'no'}"
            + (f" (activated by {self.activation})" if self.activation else ""),
        ]
        lines += [f"  {tier:<9} {state}" for tier, state in self.tiers.items()]
        for p in self.patches:
            mark = "applied" if p.applied else "not needed"
            lines.append(f"  [{mark:>10}] {p.name}: {p.reason}")
        return "\n".join(lines)
