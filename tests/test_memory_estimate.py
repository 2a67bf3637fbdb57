"""Inductor's peak-memory estimate of a chunk loop whose accumulations run in place (the
package's out= kernels into the accumulator) is near the peak its generated code holds,
so ``reorder_for_peak_memory`` picks on right figures (feature ``memory_estimate``)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch._inductor.compile_fx  # noqa: F401  (the feature applies once Inductor is imported)
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

from inductor_addmm_fix.inductor import reinplace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from loop_memory import inductor_estimates, jsd_forward, wrapper_peak  # noqa: E402  (benchmarks/ on sys.path)


def compiled_loop() -> tuple[float, float]:
    """(Inductor's lowest peak estimate, the generated wrapper's peak), in bytes, of an
    8-chunk JSD-shaped loop with ``accum_dtype=None`` (accumulations into a bf16 buffer)."""
    torch._dynamo.reset()
    generator = torch.Generator().manual_seed(0)
    si, ti = (torch.randn(64, h, generator=generator, dtype=torch.bfloat16) for h in (64, 64))
    sw, tw = (torch.randn(512, 64, generator=generator, dtype=torch.bfloat16) / 8 for _ in range(2))
    with torch._inductor.config.patch(force_disable_caches=True), inductor_estimates() as estimates:
        _, codes = run_and_get_code(torch.compile(jsd_forward), si, sw, ti, tw, None)
    assert estimates, "Inductor did not estimate the peak (reorder_for_peak_memory off?)"
    return min(estimates), wrapper_peak(codes[0])[0]


def test_the_estimate_of_a_loop_of_in_place_accumulations_is_near_its_real_peak():
    counters["inductor_addmm_fix"].clear()
    estimate, real = compiled_loop()
    if reinplace.fallback_kernel_runs_out_variants():  # accumulations are out= kernels (torch 2.11+)
        assert counters["inductor_addmm_fix"]["memory_estimate:out_accumulations"] > 0
    assert real / 2 <= estimate <= real * 2, (estimate, real)
