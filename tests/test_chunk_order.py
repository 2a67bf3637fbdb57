"""Tier 2e (issue 8): a chunked accumulation loop, FLCE's shape, keeps chunk order.

Stock Inductor on torch 2.13 CPU hoists every chunk's logits matmul ahead of the
chunks' consumers, so all chunks' logits are alive at once; with the pass at most one
chunk's logits and its gradient are.  The pass adds ordering only: results are bitwise
those compiled without it."""

from __future__ import annotations

import re

import pytest
import torch
import torch._inductor.compile_fx  # noqa: F401  (Tier 2 is applied once Inductor is imported)
import torch._inductor.config as inductor_config
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

from inductor_addmm_fix import tier2_inductor_chunk_order as t2o
from inductor_addmm_fix import tier2_inductor_post_grad as t2p
from inductor_addmm_fix.tier2_inductor_lowerings import COUNTER

needs_pass = pytest.mark.skipif(not t2o.supported(), reason="no preserve_node_ordering in this torch")

BT, H, V, CHUNK = 32, 16, 96, 8
CHUNKS = BT // CHUNK


def flce_like(x, w, onehot, out_dtype=None):
    """A fused-linear-cross-entropy loop as Liger writes it (no autograd): per chunk the
    logits, their gradient, grad_input written through mm(out=slice), grad_weight
    accumulated with addmm(out=grad_weight)."""
    grad_input = torch.zeros_like(x)
    grad_weight = torch.zeros(V, H, dtype=torch.float32 if out_dtype else x.dtype)
    loss = torch.zeros((), dtype=torch.float32 if x.dtype != torch.float64 else x.dtype)
    for start in range(0, BT, CHUNK):
        x_k = x[start : start + CHUNK]
        logits = x_k @ w.t()
        y = onehot[start : start + CHUNK]
        g = (torch.softmax(logits.float(), -1) - y).to(x.dtype)
        loss = loss + (torch.logsumexp(logits.float(), -1) - (logits.float() * y).sum(-1)).sum()
        torch.mm(g, w, out=grad_input[start : start + CHUNK])
        if out_dtype is None:
            torch.addmm(grad_weight, g.t(), x_k, out=grad_weight)
        else:
            torch.addmm(grad_weight, g.t(), x_k, out_dtype=out_dtype, out=grad_weight)
    return loss, grad_input, grad_weight


def inputs(dtype):
    onehot = torch.nn.functional.one_hot(torch.randint(V, (BT,)), V).float()
    return torch.randn(BT, H, dtype=dtype), torch.randn(V, H, dtype=dtype) / 4, onehot


_ALLOC = re.compile(r"^\s*(buf\d+) = empty_strided_cpu\(\(([^)]*)\), \([^)]*\), (torch\.\w+)\)")


def most_alive(code: str, shape: tuple) -> int:
    """The largest number of ``shape`` buffers allocated at once, replaying the
    wrapper's ``call()``: allocations, ``del bufN`` and ``bufA = bufB; del bufB  # reuse``."""
    alive: dict[str, tuple] = {}
    best = 0
    for line in code.split("def call(", 1)[1].splitlines():
        m = _ALLOC.match(line)
        if m:
            alive[m.group(1)] = tuple(int(s) for s in m.group(2).split(",") if s.strip())
        for name in re.findall(r"\bdel (buf\d+)", line):
            alive.pop(name, None)
        reuse = re.match(r"^\s*(buf\d+) = (buf\d+); del \2\s*# reuse", line)
        if reuse and reuse.group(2) in alive:
            alive[reuse.group(1)] = alive.pop(reuse.group(2))
        best = max(best, sum(1 for s in alive.values() if s == shape))
    return best


def compile_flce(*args, without_pass=False, **kwargs):
    counters[COUNTER].clear()
    torch._dynamo.reset()
    compiled = torch.compile(flce_like, backend="inductor", fullgraph=True)
    patches = {"fx_graph_cache": False}
    if without_pass:
        patches["post_grad_custom_post_pass"] = None
    with torch.no_grad(), inductor_config.patch(patches):
        result, codes = run_and_get_code(compiled, *args, **kwargs)
    assert len(codes) == 1
    return result, codes[0], {k.split(":", 1)[1]: n for k, n in counters[COUNTER].items() if k.startswith("chunk_order:")}


def as_float64(x, w, onehot, out_dtype=None):
    return flce_like(x.double(), w.double(), onehot.double())


@pytest.mark.parametrize("out_dtype", [None, torch.float32], ids=["fp32 addmm", "bf16 addmm.dtype into fp32"])
@needs_pass
def test_chunk_logits_not_all_alive_and_results_unchanged(out_dtype):
    x, w, target = inputs(torch.float32 if out_dtype is None else torch.bfloat16)
    fixed, code, counts = compile_flce(x, w, target, out_dtype)
    stock, stock_code, stock_counts = compile_flce(x, w, target, out_dtype, without_pass=True)

    # The pass found the loop and ordered it.
    assert counts["graphs"] == 1 and counts["chunks"] == CHUNKS and counts["edges"] >= CHUNKS - 1, counts
    assert stock_counts == {}
    assert "control_deps" not in stock_code
    # Without it, Inductor hoists the logits of (nearly) every chunk; with it, at most
    # one chunk's logits and one chunk's logits gradient are alive.
    logits = (CHUNK, V)
    assert most_alive(stock_code, logits) > 2
    assert most_alive(code, logits) <= 2

    # Ordering only: bitwise the results compiled without the pass.
    for a, b in zip(fixed, stock):
        assert torch.equal(a, b)
    # And the loop's values.
    ref = as_float64(x, w, target)
    tol = dict(rtol=1e-4, atol=1e-4) if out_dtype is None else dict(rtol=2e-2, atol=2e-2)
    for got, want in zip(fixed, ref):
        torch.testing.assert_close(got.double(), want.double(), **tol)
    if out_dtype is None:  # eager has no CPU kernel for addmm.dtype
        with torch.no_grad():
            eager = flce_like(x, w, target)
        for got, want in zip(fixed, eager):
            torch.testing.assert_close(got, want)


def no_loop(x, w, b):
    """An addmm chain with no matmul of its own per step, a single matmul, and a
    chain whose steps all share one product: no chunk roots."""
    acc = torch.zeros(V, H)
    for start in range(0, BT, CHUNK):
        torch.addmm(acc, b[start : start + CHUNK].t(), x[start : start + CHUNK], out=acc)
    p = x @ w.t()
    shared = torch.zeros(BT, BT)
    for _ in range(3):
        torch.addmm(shared, p, p.t(), out=shared)
    return acc, shared


@needs_pass
def test_graph_without_the_pattern_is_untouched():
    x, w = torch.randn(BT, H), torch.randn(V, H)
    b = torch.randn(BT, V)
    graphs = []

    def spy(graph):
        graphs.append(str(graph))
        edges = t2o.serialize_chunks(graph)
        graphs.append(str(graph))
        assert edges == 0

    def run(custom):
        torch._dynamo.reset()
        counters[COUNTER].clear()
        with torch.no_grad(), inductor_config.patch(force_disable_caches=True, post_grad_custom_post_pass=custom):
            return run_and_get_code(torch.compile(no_loop, fullgraph=True), x, w, b)

    (acc, shared), codes = run(t2p.make_chained_pass(spy))
    assert len(graphs) == 2 and graphs[0] == graphs[1]  # the FX graph, as text, before and after
    assert not any(k.startswith(("chunk_order:", "slice_writes:")) for k in counters[COUNTER])
    _, stock_codes = run(None)
    assert _without_ids(codes) == _without_ids(stock_codes)  # and byte-identical output code
    torch.testing.assert_close(acc, b.t() @ x)


def _without_ids(codes):
    """Output code less its "# AOT ID: ['<n>_inference']" line (a per-process count)."""
    return [re.sub(r"^# AOT ID: .*$", "", c, count=1, flags=re.M) for c in codes]


def test_the_pass_never_raises(monkeypatch):
    def broken(graph):
        raise RuntimeError("unexpected graph")

    monkeypatch.setattr(t2o, "plan_edges", broken)
    counters[COUNTER].clear()
    graph = torch.fx.symbolic_trace(lambda a: a + 1).graph
    before = str(graph)
    assert t2o.serialize_chunks(graph) == 0
    assert str(graph) == before
    assert counters[COUNTER]["chunk_order:error"] == 1
