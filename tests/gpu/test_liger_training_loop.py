"""A training loop's view of Liger FLCE: fresh batches, one compiled head, every step
compared with eager, and the compiles counted.

Each case runs the same batches through eager Liger and through one ``torch.compile``d
``liger_fused_linear_cross_entropy`` and compares every step's loss and gradients.  The
cells cross Dynamo's configuration (default: Liger's ``.item()`` breaks the graph;
``capture_scalar_outputs``), the shapes (fixed; a changing row count with the same
number of chunks; ``dynamic=True``), the reduction, class weights and the accumulation
dtype; CUDA graphs (``reduce-overhead``) run in a few cells.

``grad_x`` must equal eager bit for bit, and so must ``grad_w`` where the package summed
it chunk by chunk as eager does.  Where ``accumulate_pairs`` summed two chunks per pass
(the same sums in another order; ``INDUCTOR_ADDMM_FIX=1,-accumulate_pairs`` turns it off)
``grad_w`` is held to eager's own error against a float64 reference instead (within 1.5x
of it); the loss may differ by the order of its final sum (fp32).  Compiles: a frame may compile twice (the first
shape, then dynamic shapes and values), never on later steps.

Set ``LOOP_FEATURES=<spec>`` to run with those features of the package (as
``install(features=...)`` takes them, e.g. ``-accumulate_pairs``), ``LOOP_RESULTS=path``
to append one JSON line per case (``scripts/loop_table.py``
renders them as the table in docs/gpu-results.md).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os

import pytest
import torch
from torch._dynamo.utils import counters

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
liger = pytest.importorskip("liger_kernel.transformers.functional", reason="needs liger-kernel")

H, V = 64, 512  # 8x more vocabulary than hidden: chunks of next_pow2(rows / 8) rows
ROWS = {  # steps' row counts: the same number of chunks (6 of 32 rows) within a case
    "fixed": (188, 188, 188, 188),
    "rows": (188, 170, 192, 175),
    "dynamic": (188, 170, 192, 175),
}


@dataclasses.dataclass(frozen=True)
class Cell:
    config: str  # "default" | "capture_scalars"
    shapes: str  # "fixed" | "rows" | "dynamic"
    reduction: str  # "mean" | "sum"
    weights: bool
    accum: str  # "fp32" | "none"
    mode: str | None = None  # "reduce-overhead": CUDA graphs

    def __str__(self) -> str:
        parts = [self.config, self.shapes, self.reduction, "weights" if self.weights else "plain", self.accum]
        return "-".join(parts + ([self.mode] if self.mode else []))


CELLS = [
    Cell(*c)
    for c in itertools.product(("default", "capture_scalars"), ROWS, ("mean", "sum"), (False, True), ("fp32", "none"))
] + [
    Cell("default", "fixed", "mean", weights, "fp32", "reduce-overhead") for weights in (False, True)
] + [Cell("capture_scalars", "fixed", "mean", False, "fp32", "reduce-overhead")]


@pytest.fixture(autouse=True)
def loop_features():
    spec = os.environ.get("LOOP_FEATURES")
    if not spec:
        yield
        return
    import inductor_addmm_fix

    inductor_addmm_fix.install(spec)
    yield
    inductor_addmm_fix.install()


def _batch(generator: torch.Generator, rows: int):
    x = torch.randn(rows, H, device="cuda", generator=generator).to(torch.bfloat16)
    target = torch.randint(V, (rows,), device="cuda", generator=generator)
    ignored = torch.rand(rows, device="cuda", generator=generator) < 0.3
    target[ignored] = -100
    return x, target


def _step(fn, x0, w0, target, ce_weight):
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    loss = fn(x, w, target, ce_weight)
    loss.backward()
    return loss.detach().clone(), x.grad.clone(), w.grad.clone()  # clone: CUDA graph outputs are reused


def _float64_grad_w(x, w, target, ce_weight, reduction: str) -> torch.Tensor:
    """d loss / d w in float64: cross entropy of ``x @ w.t()`` with Liger's conventions
    (ignore_index -100; "mean" divides by the weight of the rows kept)."""
    w64 = w.detach().double().requires_grad_()
    logits = x.detach().double() @ w64.t()
    weight = None if ce_weight is None else ce_weight.double()
    torch.nn.functional.cross_entropy(logits, target, weight=weight, ignore_index=-100, reduction=reduction).backward()
    return w64.grad


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).norm() / want.norm()).item()


def _differs(got: torch.Tensor, want: torch.Tensor) -> float:
    return 0.0 if torch.equal(got, want) else (got.double() - want.double()).abs().max().item()


@pytest.mark.parametrize("cell", CELLS, ids=str)
def test_every_step_matches_eager_and_no_step_recompiles(cell: Cell):
    generator = torch.Generator(device="cuda").manual_seed(0)
    w0 = (torch.randn(V, H, device="cuda", generator=generator) / 8).to(torch.bfloat16)
    ce_weight = torch.rand(V, device="cuda", generator=generator) + 0.5 if cell.weights else None
    accum = torch.float32 if cell.accum == "fp32" else None

    def head(x, w, target, cw):
        return liger.liger_fused_linear_cross_entropy(x, w, target, ce_weight=cw, reduction=cell.reduction, accum_dtype=accum)

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(head, dynamic=True if cell.shapes == "dynamic" else None, mode=cell.mode)
    rows_per_step = ROWS[cell.shapes]
    graphs, worst = [], {"loss": 0.0, "grad_x": 0.0, "grad_w": 0.0}
    error_ratio = 0.0  # compiled grad_w's error vs float64, over eager's
    with torch._dynamo.config.patch(capture_scalar_outputs=cell.config == "capture_scalars"):
        for rows in rows_per_step:
            x, target = _batch(generator, rows)
            want = _step(head, x, w0, target, ce_weight)
            if cell.mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            got = _step(compiled, x, w0, target, ce_weight)
            for name, g, e in zip(worst, got, want):
                assert g.dtype == e.dtype and g.shape == e.shape, name
                worst[name] = max(worst[name], _differs(g, e))
            exact = _float64_grad_w(x, w0, target, ce_weight, cell.reduction)
            eager_error = _relative_error(want[2], exact)
            error_ratio = max(error_ratio, _relative_error(got[2], exact) / max(eager_error, 1e-12))
            graphs.append(counters["stats"]["unique_graphs"])
    import inductor_addmm_fix

    # Whether chunks may be summed in pairs: the feature, not this run's counter (0 where
    # Inductor's FX graph cache served a graph compiled, and merged, before).
    pairs_on = inductor_addmm_fix.status().features.get("accumulate_pairs") == "applied"
    pairs = counters["inductor_addmm_fix"]["accumulate_pairs:pairs"]
    row = {
        "cell": str(cell),
        "features": os.environ.get("LOOP_FEATURES") or "all",
        "pairs_merged": pairs,  # compiled here (not served from the cache)
        **dataclasses.asdict(cell),
        "graphs_per_step": graphs,
        "max_abs_diff": worst,
        "grad_w_error_over_eagers": error_ratio,
    }
    if os.environ.get("LOOP_RESULTS"):
        with open(os.environ["LOOP_RESULTS"], "a") as f:
            f.write(json.dumps(row) + "\n")
    print(row)
    # Compiles: the first step, the second (dynamic shapes or values); none after.
    assert graphs[-1] == graphs[1], f"graphs after each step {graphs}: later steps recompiled"
    assert worst["grad_x"] == 0.0, worst
    if pairs_on:
        assert error_ratio <= 1.5, f"grad_w error vs float64 {error_ratio:.2f}x eager's"
    else:
        assert worst["grad_w"] == 0.0, worst
    assert worst["loss"] <= 4e-6 * max(1.0, abs(want[0].item())), worst
