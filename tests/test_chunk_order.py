"""A chunked accumulation loop, FLCE's shape, keeps chunk order.

After functionalization nothing orders chunk k+1's logits matmul after chunk k's work,
and stock Inductor hoists every chunk's logits matmul ahead of the chunks' consumers, so
all chunks' logits are alive at once.  The ``chunk_order`` pass makes each chunk's root
matmul wait for the previous chunk's work (``control_deps``): at most one chunk's
logits and its gradient are alive.  It adds ordering only: results are bitwise those
compiled without it.  First the pass on small FX graphs, then compiled loops."""

from __future__ import annotations

import re

import pytest
import torch
import torch._inductor.compile_fx  # noqa: F401  (the Inductor part applies once Inductor is imported)
from torch._dynamo.utils import counters
from torch.fx.experimental.proxy_tensor import make_fx

from helpers import compile_and_run, most_alive
from workloads import BT, CHUNK, CHUNKS, H, V, flce_inputs, flce_like, flce_with_a_graph_break

from inductor_addmm_fix.inductor.passes import chunk_order, post_grad_slot
from inductor_addmm_fix.patching.counters import COUNTER

needs_pass = pytest.mark.skipif(not chunk_order.supported(), reason="no preserve_node_ordering in this torch")
# The order of single chunks: accumulate_pairs (specified in test_accumulate_pairs.py) off.
pytestmark = pytest.mark.features("-accumulate_pairs")


# ---------------------------------------------------------------- the pass on FX graphs
def accumulate_chunk_gradients(x, w, y):
    """Per chunk a logits matmul (the chunk's root), its gradient, and one step of an
    addmm accumulation chain."""
    acc = torch.zeros(V, H)
    for start in range(0, BT, CHUNK):
        x_k = x[start : start + CHUNK]
        g = torch.softmax(x_k @ w.t(), -1) - y[start : start + CHUNK]
        acc = torch.addmm(acc, g.t(), x_k)
    return acc


def unrelated_matmuls(x, w, y):
    """An addmm chain whose steps share one product, and a lone matmul: no chunk roots."""
    p = x @ w.t()
    acc = torch.zeros(BT, BT)
    for _ in range(3):
        acc = torch.addmm(acc, p, p.t())
    return acc, y @ w


def run_graph(gm, *args):
    """Run a graph whose nodes may wait on others (``control_deps(deps, subgraph, *args)``
    computes ``subgraph(*args)``): the values, whatever eager kernels the HOP has."""

    class Run(torch.fx.Interpreter):
        def call_function(self, target, args, kwargs):
            if target is torch.ops.higher_order.control_deps:
                _, subgraph, *operands = args
                return subgraph(*operands)
            return super().call_function(target, args, kwargs)

    return Run(gm).run(*args)


def run_pass(gm) -> tuple[int, dict]:
    counters[COUNTER].clear()
    edges = chunk_order.serialize_chunks(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return edges, {k.split(":", 1)[1]: n for k, n in counters[COUNTER].items() if k.startswith("chunk_order:")}


@needs_pass
def test_each_chunks_root_matmul_waits_for_the_previous_chunks_work():
    x, w, y = torch.randn(BT, H), torch.randn(V, H), torch.randn(BT, V)
    gm = make_fx(accumulate_chunk_gradients, tracing_mode="fake")(x, w, y)
    edges, events = run_pass(gm)
    assert events == {"graphs": 1, "chunks": CHUNKS, "edges": edges} and edges == CHUNKS - 1
    steps = [n for n in gm.graph.nodes if n.target is torch.ops.aten.addmm.default]
    waits = [n for n in gm.graph.nodes if n.target is torch.ops.higher_order.control_deps]
    assert len(waits) == CHUNKS - 1
    for k, wait in enumerate(waits):  # chunk k+1's logits matmul, after chunk k's accumulation
        assert tuple(wait.args[0]) == (steps[k],)
    torch.testing.assert_close(run_graph(gm, x, w, y), accumulate_chunk_gradients(x, w, y), rtol=0, atol=0)


@needs_pass
def test_a_chain_without_a_matmul_per_chunk_is_left_alone_and_counted_as_declined():
    x, w, y = torch.randn(BT, H), torch.randn(V, H), torch.randn(BT, V)
    gm = make_fx(unrelated_matmuls, tracing_mode="fake")(x, w, y)
    before = str(gm.graph)
    assert run_pass(gm) == (0, {"declined:roots": 1})
    assert str(gm.graph) == before


@needs_pass
def test_a_graph_without_an_accumulation_chain_is_left_alone_uncounted():
    gm = make_fx(lambda x, w: torch.softmax(x @ w.t(), -1) @ w, tracing_mode="fake")(torch.randn(BT, H), torch.randn(V, H))
    before = str(gm.graph)
    assert run_pass(gm) == (0, {})
    assert str(gm.graph) == before


def test_the_pass_never_raises(monkeypatch):
    def broken(graph):
        raise RuntimeError("unexpected graph")

    monkeypatch.setattr(chunk_order, "plan_edges", broken)
    gm = torch.fx.symbolic_trace(lambda a: a + 1)
    before = str(gm.graph)
    assert run_pass(gm) == (0, {"error": 1})
    assert str(gm.graph) == before


# ---------------------------------------------------------------- compiled loops


LOOP_CHUNKS = 3  # of CHUNK rows: stock Inductor already holds more than 2 chunks' logits at once


def compile_flce(*args, without_pass=False):
    compiled = compile_and_run(flce_like, *args, no_grad=True, post_grad_passes=not without_pass)
    assert len(compiled.codes) == 1
    return compiled.result, compiled.codes[0], compiled.events("chunk_order")


def as_float64(x, w, onehot, out_dtype=None):
    return flce_like(x.double(), w.double(), onehot.double())


@pytest.mark.parametrize(
    "out_dtype", [pytest.param(None, marks=pytest.mark.slow), torch.float32], ids=["fp32 addmm", "bf16 addmm.dtype into fp32"]
)
@needs_pass
def test_chunk_logits_not_all_alive_and_results_unchanged(out_dtype):
    x, w, target = flce_inputs(torch.float32 if out_dtype is None else torch.bfloat16, rows=LOOP_CHUNKS * CHUNK)
    fixed, code, counts = compile_flce(x, w, target, out_dtype)
    stock, stock_code, stock_counts = compile_flce(x, w, target, out_dtype, without_pass=True)

    # The pass found the loop and ordered it.
    assert counts["graphs"] == 1 and counts["chunks"] == LOOP_CHUNKS and counts["edges"] >= LOOP_CHUNKS - 1, counts
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
def test_compiled_code_of_a_graph_without_the_pattern_is_unchanged(monkeypatch):
    x, w = torch.randn(BT, H), torch.randn(V, H)
    b = torch.randn(BT, V)
    graphs = []
    real = chunk_order.serialize_chunks

    def spy(graph):
        graphs.append(str(graph))
        edges = real(graph)
        graphs.append(str(graph))
        assert edges == 0
        return edges

    monkeypatch.setitem(post_grad_slot.PASSES, chunk_order.NAME, spy)
    ours = compile_and_run(no_loop, x, w, b, no_grad=True)
    assert len(graphs) == 2 and graphs[0] == graphs[1]  # the FX graph, as text, before and after
    assert {k: n for k, n in ours.counts.items() if k.startswith(("chunk_order:", "slice_writes:"))} == {
        "chunk_order:declined:roots": 1  # the longer chain, a step without a matmul of its own
    }
    stock = compile_and_run(no_loop, x, w, b, no_grad=True, post_grad_passes=False)
    assert _without_ids(ours.codes) == _without_ids(stock.codes)  # and byte-identical output code
    torch.testing.assert_close(ours.result[0], b.t() @ x)


def _without_ids(codes):
    """Output code less its "# AOT ID: ['<n>_inference']" line (a per-process count)."""
    return [re.sub(r"^# AOT ID: .*$", "", c, count=1, flags=re.M) for c in codes]



def test_finding_the_chunks_adds_no_guard_on_symbolic_sizes():
    """Ranking matmuls by size must not guard on a symbolic size (``int()`` of a SymInt
    does): a guard there recompiles the loop for every other row count."""
    from torch._guards import detect_fake_mode

    def loop(x, w, acc):
        n = x.shape[0] // 4
        for k in range(4):
            x_k = x[k * n : (k + 1) * n]
            acc = torch.addmm(acc, torch.softmax(x_k @ w.t(), -1).t(), x_k)
        return acc

    graph = make_fx(loop, tracing_mode="symbolic")(torch.randn(4 * CHUNK, H), torch.randn(V, H), torch.zeros(V, H)).graph
    (chain,) = chunk_order.accumulation_chains(graph)
    shape_env = detect_fake_mode([n.meta["val"] for n in graph.nodes if "val" in n.meta]).shape_env
    guards = len(shape_env.guards)
    assert len(chunk_order.chunk_roots(chain)) == 4
    assert len(shape_env.guards) == guards
