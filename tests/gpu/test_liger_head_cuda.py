"""Unmodified Liger FLCE under compile with changing lengths: its forward as the
package's opaque op where the token count is symbolic, bit for bit eager's results,
and no recompile per length."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from helpers import aten_calls
from inductor_addmm_fix.dynamo import liger_head, liger_head_op
from inductor_addmm_fix.patching.counters import COUNTER

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
functional = pytest.importorskip("liger_kernel.transformers.functional", reason="needs liger-kernel")

H, V = 256, 32000  # Liger: cdiv(V, H) = 125, chunks of next_power_of_2(cdiv(BT, 125)) rows
LENGTHS = (700, 1100, 530, 1900, 1300, 900, 1500, 610)  # 8 lengths, 8 chunk counts (64-122 chunks)
H_SHORT_LOOP = 1024  # cdiv(V, H) = 32: 16 to 32 chunks, a loop that auto may promote


def make(rows, *, bias=False, seed=0, dtype=torch.bfloat16, hidden=H):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(rows, hidden, device="cuda", generator=g).to(dtype).requires_grad_()
    w = (torch.randn(V, hidden, device="cuda", generator=g) * 0.02).to(dtype).requires_grad_()
    t = torch.randint(0, V, (rows,), device="cuda", generator=g)
    t[::7] = -100
    b = (torch.randn(V, device="cuda", generator=g) * 0.02).to(dtype).requires_grad_() if bias else None
    return x, w, t, b


def clone(tensors):
    return [None if t is None else t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


def run(options):
    def step(x, w, t, b):
        out = functional.liger_fused_linear_cross_entropy(x, w, t, b, **options)
        outs = [out] if isinstance(out, torch.Tensor) else [out.loss, out.z_loss, out.token_accuracy, out.predicted_tokens]
        (outs[0].sum() if outs[0].dim() else outs[0]).backward()
        return [o.detach() for o in outs if o is not None]

    return step


def assert_same(got_out, want_out, tensors, eager_tensors):
    for a, b in zip(got_out, want_out):
        assert a.dtype == b.dtype and torch.equal(a, b), (a, b)
    for a, b in zip(tensors, eager_tensors):
        if b is not None and b.requires_grad:
            assert a.grad is not None and torch.equal(a.grad, b.grad)


@pytest.fixture(autouse=True)
def fresh_counters():
    counters.clear()
    liger_head_op.reset_tiers()


def test_changing_lengths_match_eager_bit_for_bit_and_stop_recompiling():
    assert len({liger_head.liger_chunks((n, H), (V, H)) for n in LENGTHS}) == len(LENGTHS)
    step = run({"accum_dtype": torch.float32})
    compiled = torch.compile(step)
    graphs = []
    for i, rows in enumerate(LENGTHS):
        tensors = make(rows, seed=i)
        eager_tensors = clone(tensors)
        assert_same(compiled(*tensors), step(*eager_tensors), tensors, eager_tensors)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[2:] == [graphs[1]] * (len(LENGTHS) - 2), graphs
    assert counters[COUNTER]["liger_head:run"] > 0


OPTIONS = {
    "sum": dict(reduction="sum"),
    "none": dict(reduction="none"),
    "accum-none": dict(accum_dtype=None),
    "bias": dict(bias=True),
    "z-loss": dict(lse_square_scale=1e-4, return_z_loss=True),
    "label-smoothing": dict(label_smoothing=0.1),
    "softcap": dict(softcap=30.0),
    "ce-weight": dict(ce_weight=True),
    "token-scaling": dict(use_token_scaling=True),
    "token-scaling-softcap-z-loss": dict(use_token_scaling=True, softcap=30.0, lse_square_scale=1e-4, return_z_loss=True),
    "accuracy-predictions": dict(return_token_accuracy=True, return_predicted_tokens=True),
}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_every_option_matches_eager_bit_for_bit_with_symbolic_lengths(options):
    options = dict(options)
    bias = options.pop("bias", False)
    if options.pop("ce_weight", False):
        options["ce_weight"] = torch.rand(V, device="cuda") + 0.5
    step = run(options)
    compiled = torch.compile(step, dynamic=True)
    for i, rows in enumerate((700, 1100)):
        tensors = make(rows, bias=bias, seed=10 + i)
        eager_tensors = clone(tensors)
        assert_same(compiled(*tensors), step(*eager_tensors), tensors, eager_tensors)
    assert counters[COUNTER]["liger_head:run"] > 0


def test_a_fixed_length_compiles_the_loop_after_promote_after_steps():
    assert liger_head.liger_chunks((1024, H_SHORT_LOOP), (V, H_SHORT_LOOP)) <= liger_head.LOOP_MAX_CHUNKS
    step = run({"accum_dtype": torch.float32})
    compiled = torch.compile(step)
    steps = liger_head_op.PROMOTE_AFTER + 2
    for i in range(steps):
        tensors = make(1024, seed=30 + i, hidden=H_SHORT_LOOP)
        eager_tensors = clone(tensors)
        got, want = compiled(*tensors), step(*eager_tensors)
        if i < liger_head_op.PROMOTE_AFTER:  # the op: Liger's own forward
            assert_same(got, want, tensors, eager_tensors)
        else:  # the loop, compiled: float32 accumulation in another order
            torch.testing.assert_close(got[0], want[0], atol=5e-2, rtol=5e-2)
    assert counters[COUNTER]["liger_head:run"] == liger_head_op.PROMOTE_AFTER
    assert counters[COUNTER]["liger_head:promoted"] == 1
    assert liger_head.mode() == "auto"


@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_liger_s_function_joins_the_graph_with_eager_s_weight_gradient(scale):
    """Liger's functional entry asks its Function ``getattr(..., "supports_inner_impl_dispatch",
    False)`` and its backward branches on ``grad_output == 1``; answered as a constant and
    traced as the package's product, neither breaks the graph, and the weight gradient is
    eager's bit for bit."""

    def loss(x, w, t):
        return functional.liger_fused_linear_cross_entropy(torch.tanh(x), w, t, accum_dtype=torch.float32) * scale

    tensors = make(1024, seed=40)[:3]
    eager_tensors = clone(tensors)
    torch.compile(loss)(*tensors).backward()
    loss(*eager_tensors).backward()
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert torch.equal(tensors[1].grad, eager_tensors[1].grad)
    torch.testing.assert_close(tensors[0].grad, eager_tensors[0].grad)


def test_token_scaling_runs_without_a_host_sync_per_chunk_bit_for_bit():
    """The op runs Liger's forward with its token scaling's boolean indexing rewritten
    (``dynamo/liger_token_scaling.py``): no ``nonzero`` where eager runs some per chunk,
    eager's results bit for bit, a chunk whose targets are all ignored included."""
    from liger_kernel.ops import fused_linear_cross_entropy as flce
    from inductor_addmm_fix.dynamo import liger_token_scaling

    assert liger_token_scaling.why_not(flce.fused_linear_cross_entropy_forward) is None
    step = run(dict(use_token_scaling=True))
    compiled = torch.compile(step, dynamic=True)
    for i, rows in enumerate((700, 1100, 900)):
        tensors = make(rows, seed=20 + i)
        tensors[2][:64] = -100  # the first chunk (8 rows a chunk at these lengths) and more ignored
        eager_tensors = clone(tensors)
        got, want = [], []
        compiled_calls = aten_calls(lambda: got.extend(compiled(*tensors))).get("aten::nonzero", 0)
        eager_calls = aten_calls(lambda: want.extend(step(*eager_tensors))).get("aten::nonzero", 0)
        assert_same(got, want, tensors, eager_tensors)
        assert compiled_calls == 0 and eager_calls >= liger_head.liger_chunks((rows, H), (V, H))
    assert counters[COUNTER]["liger_head:token_scaling:sync_free"] >= 1
