"""Compile a function with Inductor and return the result, the generated code and
what the plugin's lowerings counted: proof that the op reached Inductor."""

from __future__ import annotations

import dataclasses

import torch
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

from inductor_addmm_fix.tier2_inductor_lowerings import COUNTER


@dataclasses.dataclass
class Compiled:
    result: object
    code: str
    counts: dict

    def lowered(self, op: str) -> int:
        """How many times the plugin lowered ``<op>.dtype`` (any choice)."""
        return sum(n for key, n in self.counts.items() if key.startswith(f"{op}.dtype:"))


def compile_and_run(fn, *args, dynamic=False, **options) -> Compiled:
    counters[COUNTER].clear()
    compiled = torch.compile(fn, backend="inductor", fullgraph=True, dynamic=dynamic, **options)
    # A graph served from the FX graph cache skips lowering; count every lowering.
    with torch._inductor.config.patch(force_disable_caches=True):
        result, codes = run_and_get_code(compiled, *args)
    return Compiled(result, "\n".join(codes), dict(counters[COUNTER]))
