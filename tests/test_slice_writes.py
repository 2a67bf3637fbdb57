"""Chunked writes into slices of one buffer are slice-sized.

FLCE writes each chunk's input gradient with ``torch.mm(g, W, out=grad_input[a:b])``.
Functionalization turns the loop into a chain of ``slice_scatter`` ops; stock Inductor
lowers each one to a kernel over the whole buffer.  The ``slice_writes`` pass rewrites
a chain it can prove equal into one ``cat`` (whose pieces the matmuls write straight
into), or, when the buffer is a graph input copied back at the end, into ``copy_``
writes of its slices.  First the pass on small FX graphs, then compiled loops."""

from __future__ import annotations

import re

import pytest
import torch
import torch._inductor.compile_fx  # noqa: F401  (the Inductor part applies once Inductor is imported)
from torch._dynamo.utils import counters
from torch.fx.experimental.proxy_tensor import make_fx

from helpers import compile_and_run
from workloads import chunked_grad_input

from inductor_addmm_fix.inductor.passes import post_grad_slot, slice_writes
from inductor_addmm_fix.patching.counters import COUNTER

pytestmark = pytest.mark.skipif(not post_grad_slot.supported(), reason="no post_grad_custom_post_pass in this torch")

aten = torch.ops.aten
H, V = 16, 24
MANY = 12  # chunks: above Inductor's max_pointwise_cat_inputs (8)


# ---------------------------------------------------------------- the pass on FX graphs
def write_chunks(base, *pieces, rows=2, every=1):
    """Functional form of ``out[k*rows:(k+1)*rows] = piece_k``: a slice_scatter chain."""
    out = base
    for k, piece in enumerate(pieces):
        start = k * rows * every
        out = torch.slice_scatter(out, piece, 0, start, start + rows)
    return out


def write_chunks_back_into_the_input(base, *pieces):
    """The chain's result copied back into ``base`` (functionalized ``out=`` on slices of
    a graph input), then read."""
    out = write_chunks(base, *pieces)
    base.copy_(out)
    return base.sum()


def traced(fn, base, pieces, tracing_mode="fake"):
    return make_fx(fn, tracing_mode=tracing_mode)(base, *pieces)


def targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def rewrite(gm) -> tuple[int, dict]:
    counters[COUNTER].clear()
    done = slice_writes.rewrite_slice_writes(gm.graph)
    gm.graph.lint()
    gm.recompile()
    events = {k.split(":", 1)[1]: n for k, n in counters[COUNTER].items() if k.startswith("slice_writes:")}
    return done, events


def test_a_chain_of_disjoint_writes_becomes_one_cat():
    base, pieces = torch.randn(MANY * 2, H), [torch.randn(2, H) for _ in range(MANY)]
    gm = traced(write_chunks, base, pieces)
    assert targets(gm).count(aten.slice_scatter.default) == MANY
    assert rewrite(gm) == (1, {"chains": 1, "pieces": MANY, "cat": 1})
    assert aten.slice_scatter.default not in targets(gm) and targets(gm).count(aten.cat.default) == 1
    assert torch.equal(gm(base, *pieces), write_chunks(base, *pieces))


def test_the_gaps_of_a_cat_are_slices_of_the_buffer():
    base, pieces = torch.randn(MANY * 4 + 3, H), [torch.randn(2, H) for _ in range(MANY)]
    fn = lambda base, *pieces: write_chunks(base, *pieces, every=2)  # noqa: E731
    gm = traced(fn, base, pieces)
    assert rewrite(gm) == (1, {"chains": 1, "pieces": MANY, "cat": 1})
    (cat,) = [n for n in gm.graph.nodes if n.target is aten.cat.default]
    assert len(cat.args[0]) == 2 * MANY  # every write, and a slice of the buffer after each
    assert torch.equal(gm(base, *pieces), fn(base, *pieces))


def test_writes_into_a_graph_input_copied_back_become_copies_into_its_slices():
    base, pieces = torch.randn(8, H), [torch.randn(2, H) for _ in range(4)]
    gm = traced(write_chunks_back_into_the_input, base, pieces)
    assert rewrite(gm) == (1, {"chains": 1, "pieces": 4, "in_place": 1})
    assert aten.slice_scatter.default not in targets(gm)
    copies = [n for n in gm.graph.nodes if n.target is aten.copy_.default]
    assert len(copies) == 4 and all(n.args[0].target is aten.slice.Tensor for n in copies)  # no whole-buffer copy
    expected = base.clone()
    total = write_chunks_back_into_the_input(expected, *pieces)
    assert torch.equal(gm(base, *pieces), total) and torch.equal(base, expected)


def overlapping(base, *pieces):
    out = base
    for k, piece in enumerate(pieces):
        out = torch.slice_scatter(out, piece, 0, k, k + 2)  # each write overlaps the next
    return out


def read_mid_chain(base, *pieces):
    out, seen = base, []
    for k, piece in enumerate(pieces):
        out = torch.slice_scatter(out, piece, 0, 2 * k, 2 * k + 2)
        seen.append(out.sum())  # an intermediate state has a second user
    return out, torch.stack(seen)


@pytest.mark.parametrize(
    "fn, n",
    [(write_chunks, 4), (overlapping, MANY), (read_mid_chain, MANY)],
    ids=["too-few-pieces", "overlapping-writes", "intermediate-read"],
)
def test_chains_it_cannot_prove_or_that_are_short_are_left_alone(fn, n):
    base, pieces = torch.randn(2 * MANY + 2, H), [torch.randn(2, H) for _ in range(n)]
    gm = traced(fn, base, pieces)
    before = str(gm.graph)
    assert rewrite(gm) == (0, {})
    assert str(gm.graph) == before


def test_a_cat_with_symbolic_bounds_is_left_alone():
    base, pieces = torch.randn(MANY * 2, H), [torch.randn(2, H) for _ in range(MANY)]
    gm = traced(lambda base, *p: write_chunks(base, *p, rows=p[0].shape[0]), base, pieces, "symbolic")
    before = str(gm.graph)
    assert rewrite(gm) == (0, {})
    assert str(gm.graph) == before


def write_rows_back_into_the_input(base, *pieces):
    """:func:`write_chunks_back_into_the_input` with bounds from the pieces' sizes
    (symbolic when traced symbolically)."""
    out = write_chunks(base, *pieces, rows=pieces[0].shape[0])
    base.copy_(out)
    return base.sum()


def test_writes_into_a_graph_input_with_symbolic_bounds_become_copies_into_its_slices():
    base, pieces = torch.randn(8, H), [torch.randn(2, H) for _ in range(4)]
    gm = traced(write_rows_back_into_the_input, base, pieces, "symbolic")
    bounds = [n.args[3] for n in gm.graph.nodes if n.target is aten.slice_scatter.default]
    assert any(isinstance(b, torch.fx.Node) for b in bounds)  # the control: bounds are symbolic
    assert rewrite(gm) == (1, {"chains": 1, "pieces": 4, "in_place": 1})
    assert aten.slice_scatter.default not in targets(gm)
    expected = base.clone()
    total = write_rows_back_into_the_input(expected, *pieces)
    assert torch.equal(gm(base, *pieces), total) and torch.equal(base, expected)


def overlapping_back_into_the_input(base, *pieces):
    out = overlapping(base, *pieces)
    base.copy_(out)
    return base.sum()


def test_overlapping_writes_into_a_graph_input_are_written_in_order():
    base, pieces = torch.randn(MANY + 2, H), [torch.randn(2, H) for _ in range(MANY)]
    gm = traced(overlapping_back_into_the_input, base, pieces)
    assert rewrite(gm) == (1, {"chains": 1, "pieces": MANY, "in_place": 1})
    expected = base.clone()
    total = overlapping_back_into_the_input(expected, *pieces)
    assert torch.equal(gm(base, *pieces), total) and torch.equal(base, expected)  # the later write wins


def write_then_read(base, piece):
    out = torch.slice_scatter(base, piece, 0, 2, 4)
    return out[2:4] * 2, out[1:3] * 3  # the rows written; rows half written


def test_a_slice_reading_back_the_rows_just_written_reads_their_source():
    base, piece = torch.randn(8, H), torch.randn(2, H)
    gm = traced(write_then_read, base, [piece])
    counters[COUNTER].clear()
    assert slice_writes.forward_read_backs(gm.graph) == 1
    gm.graph.lint()
    gm.recompile()
    (mul_2, mul_3) = [n for n in gm.graph.nodes if n.target is aten.mul.Tensor]
    assert mul_2.args[0].op == "placeholder"  # the piece itself
    assert mul_3.args[0].target is aten.slice.Tensor  # other rows: still read from the scatter
    for got, want in zip(gm(base, piece), write_then_read(base, piece)):
        assert torch.equal(got, want)


def test_the_pass_never_raises(monkeypatch):
    def broken(chain):
        raise RuntimeError("unexpected graph")

    monkeypatch.setattr(slice_writes, "plan_cat", broken)
    base, pieces = torch.randn(MANY * 2, H), [torch.randn(2, H) for _ in range(MANY)]
    gm = traced(write_chunks, base, pieces)
    before = str(gm.graph)
    assert rewrite(gm) == (0, {"error": 1})
    assert str(gm.graph) == before

    x, w = torch.randn(MANY * 4, H), torch.randn(V, H)
    compiled = compile_and_run(chunked_grad_input, x, w, 4)
    assert compiled.events("slice_writes") == {"error": 1}
    assert_close_to_float64(compiled.result, reference(x, w, 4))


# ---------------------------------------------------------------- compiled loops
_ALIAS = re.compile(r"(buf\d+) = reinterpret_tensor\((buf\d+), \((\d+), (\d+)\), \((\d+), 1\), (\d+)\)\s+# alias")


def slices_written_in_place(code: str, rows: int) -> dict[str, list[int]]:
    """Output buffer -> row offsets of the ``rows x H`` views that an extern matmul
    writes with ``out=``: the slices written straight into the result."""
    written: dict[str, list[int]] = {}
    aliases = {m.group(1): m for m in _ALIAS.finditer(code)}
    for out in re.findall(r"extern_kernels\.mm\([^\n]*out=(buf\d+)\)", code):
        m = aliases.get(out)
        if m and int(m.group(3)) == rows and int(m.group(4)) == H:
            written.setdefault(m.group(2), []).append(int(m.group(6)) // H)
    return written


def reference(x, w, chunk):
    return chunked_grad_input(x.double(), w.double(), chunk)


def assert_close_to_float64(out, expected):
    """Within rounding of out's dtype from a float64 reference."""
    tol = 2e-2 if out.dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(out.double(), expected.double(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [4, 3])  # 3: a last chunk of fewer rows
def test_each_chunk_writes_only_its_rows(dtype, chunk):
    bt = MANY * 4
    x, w = torch.randn(bt, H, dtype=dtype), torch.randn(V, H, dtype=dtype) / 4
    compiled = compile_and_run(chunked_grad_input, x, w, chunk)
    chunks = -(-bt // chunk)
    assert compiled.events("slice_writes") == {"chains": 1, "pieces": chunks, "cat": 1}
    full = [offsets for offsets in slices_written_in_place(compiled.codes[0], chunk).values()]
    assert len(full) == 1 and full[0] == [k * chunk for k in range(bt // chunk)]
    assert compiled.result.dtype == dtype
    assert_close_to_float64(compiled.result, reference(x, w, chunk))


def test_stock_inductor_writes_through_whole_buffer_kernels_and_the_results_are_bitwise_equal():
    """The control: without the pass no matmul writes into the result's rows; with it
    the values are bitwise those of stock Inductor."""
    x, w = torch.randn(MANY * 4, H), torch.randn(V, H)
    stock = compile_and_run(chunked_grad_input, x, w, 4, post_grad_passes=False)
    assert stock.events("slice_writes") == {} and slices_written_in_place(stock.codes[0], 4) == {}
    ours = compile_and_run(chunked_grad_input, x, w, 4)
    assert ours.events("slice_writes")["chains"] == 1 and torch.equal(ours.result, stock.result)


def gaps_and_a_prefilled_buffer(x, w, buf):
    """Writes every other chunk into a buffer with data in it: the gaps keep that data."""
    out = buf * 2
    for k in range(0, 2 * MANY, 2):
        torch.mm(x[k * 2 : k * 2 + 2] @ w.t(), w, out=out[k * 2 : k * 2 + 2])
    return out


def test_gaps_keep_what_the_buffer_held():
    x, w, buf = torch.randn(MANY * 4 + 3, H), torch.randn(V, H), torch.randn(MANY * 4 + 3, H)
    compiled = compile_and_run(gaps_and_a_prefilled_buffer, x, w, buf)
    assert compiled.events("slice_writes") == {"chains": 1, "pieces": MANY, "cat": 1}  # the cat also holds the gaps
    expected = gaps_and_a_prefilled_buffer(x.double(), w.double(), buf.double())
    assert_close_to_float64(compiled.result, expected)


INPUT_ROWS = 32  # every other chunk written: 4 chunks of 4 rows; 6 of 3, the last one of 2


def into_a_graph_input(grad_input, x, w, chunk):
    """FLCE when grad_input comes from an earlier graph (Liger's .item() breaks the
    graph): its chunks are written into slices of a graph input, every other chunk
    here so that gaps must keep the input's data."""
    for start in range(0, x.shape[0], 2 * chunk):
        torch.mm(torch.tanh(x[start : start + chunk] @ w.t()), w, out=grad_input[start : start + chunk])
    return grad_input.sum()


@pytest.mark.parametrize("chunk", [pytest.param(4, marks=pytest.mark.slow), 3])  # 3: the last chunk short
def test_writes_into_a_graph_input_go_straight_into_its_slices(chunk):
    bt = INPUT_ROWS
    x, w, start = torch.randn(bt, H), torch.randn(V, H) / 4, torch.randn(bt, H)
    buf = start.clone()
    compiled = compile_and_run(into_a_graph_input, buf, x, w, chunk)
    writes = -(-bt // (2 * chunk))
    assert compiled.events("slice_writes") == {"chains": 1, "pieces": writes, "in_place": 1}
    # No buffer of the input's size: neither a cat nor a copy of the whole input.
    assert f"empty_strided_cpu(({bt}, {H})" not in compiled.codes[0]
    expected = start.double()
    expected_total = into_a_graph_input(expected, x.double(), w.double(), chunk)
    assert_close_to_float64(buf, expected)
    assert_close_to_float64(compiled.result, expected_total)


@pytest.mark.parametrize("chunk", [pytest.param(4, marks=pytest.mark.slow), 3])  # 3: the last chunk short
def test_writes_into_a_graph_input_with_symbolic_sizes_go_straight_into_its_slices(chunk):
    bt = INPUT_ROWS
    x, w, start = torch.randn(bt, H), torch.randn(V, H) / 4, torch.randn(bt, H)
    buf = start.clone()
    compiled = compile_and_run(into_a_graph_input, buf, x, w, chunk, dynamic=True)
    assert "(s" in compiled.codes[0]  # the control: the graph has symbolic sizes
    writes = -(-bt // (2 * chunk))
    assert compiled.events("slice_writes") == {"chains": 1, "pieces": writes, "in_place": 1}
    # no copy of the input: dynamic=True makes the hidden size symbolic (stock Inductor
    # allocates the input's (32, s27) and copies it back)
    assert not re.search(rf"empty_strided_cpu\(\((?:s\d+|{bt}), (?:s\d+|{H})\)", compiled.codes[0]), compiled.codes[0]
    expected = start.double()
    expected_total = into_a_graph_input(expected, x.double(), w.double(), chunk)
    assert_close_to_float64(buf, expected)
    assert_close_to_float64(compiled.result, expected_total)


def overlapping_into_a_graph_input(grad_input, x, w):
    """Each chunk's rows overlap the next chunk's: the later write must win, in place too."""
    for k in range(MANY):
        torch.mm(torch.tanh(x[k * 2 : k * 2 + 4] @ w.t()), w, out=grad_input[k * 2 : k * 2 + 4])
    return grad_input.sum()


def test_overlapping_writes_into_a_graph_input_compile_in_order():
    x, w, start = torch.randn(MANY * 2 + 2, H), torch.randn(V, H) / 4, torch.randn(MANY * 2 + 2, H)
    buf = start.clone()
    compiled = compile_and_run(overlapping_into_a_graph_input, buf, x, w)
    assert compiled.events("slice_writes") == {"chains": 1, "pieces": MANY, "in_place": 1}
    expected = start.double()
    expected_total = overlapping_into_a_graph_input(expected, x.double(), w.double())
    assert_close_to_float64(buf, expected)
    assert_close_to_float64(compiled.result, expected_total)


def test_stock_inductor_copies_a_whole_graph_input():
    """The control: without the pass the input's size is allocated and copied back."""
    bt = MANY * 8
    x, w, buf = torch.randn(bt, H), torch.randn(V, H), torch.randn(bt, H)
    compiled = compile_and_run(into_a_graph_input, buf, x, w, 4, post_grad_passes=False)
    assert compiled.events("slice_writes") == {} and f"empty_strided_cpu(({bt}, {H})" in compiled.codes[0]


def a_graph_input_read_elsewhere(grad_input, x, w):
    before = grad_input.sum()  # the input's old value has a reader besides the writes
    for start in range(0, x.shape[0], 4):
        torch.mm(x[start : start + 4] @ w.t(), w, out=grad_input[start : start + 4])
    return before


def test_a_graph_input_read_elsewhere_is_not_written_in_place():
    x, w, start = torch.randn(MANY * 4, H), torch.randn(V, H) / 4, torch.randn(MANY * 4, H)
    buf = start.clone()
    compiled = compile_and_run(a_graph_input_read_elsewhere, buf, x, w)
    assert "in_place" not in compiled.events("slice_writes")
    assert_close_to_float64(compiled.result, start.double().sum())
    expected = start.double()
    a_graph_input_read_elsewhere(expected, x.double(), w.double())
    assert_close_to_float64(buf, expected)


def two_chains_one_after_the_other(x, w):
    """The second loop overwrites every other chunk the first wrote; between them the
    first loop's result is read, so the two chains are separate and the second starts
    from the first one's result (its gaps keep the first loop's rows)."""
    out = torch.zeros_like(x)
    for start in range(0, x.shape[0], 4):
        torch.mm(x[start : start + 4] @ w.t(), w, out=out[start : start + 4])
    first = out.sum()
    for start in range(0, x.shape[0], 8):
        out[start : start + 4] = x[start : start + 4] * 2
    return first, out


def test_a_chain_that_continues_another_is_planned_on_the_rewritten_graph():
    x, w = torch.randn(MANY * 4, H), torch.randn(V, H) / 4
    compiled = compile_and_run(two_chains_one_after_the_other, x, w)
    assert compiled.events("slice_writes") == {"chains": 2, "pieces": MANY + MANY // 2, "cat": 2}
    first, out = compiled.result
    first_ref, out_ref = two_chains_one_after_the_other(x.double(), w.double())
    assert_close_to_float64(first, first_ref)
    assert_close_to_float64(out, out_ref)


def overlapping_writes(x, w):
    out = torch.zeros_like(x)
    for k in range(MANY):
        out[k * 2 : k * 2 + 4] = x[k * 2 : k * 2 + 4] * (k + 1)  # each write overlaps the next
    return out


def reads_mid_loop(x, w):
    out = torch.zeros_like(x)
    seen = []
    for k in range(MANY):
        out[k * 2 : k * 2 + 2] = x[k * 2 : k * 2 + 2] @ w.t() @ w
        seen.append(out.sum())  # an intermediate state has a second user
    return out, torch.stack(seen)


def few_chunks(x, w):
    return chunked_grad_input(x, w, x.shape[0] // 4)


@pytest.mark.parametrize(
    "fn, n",
    [(overlapping_writes, MANY * 2 + 2), (reads_mid_loop, MANY * 2), (few_chunks, 16)],
    ids=["overlapping-writes", "intermediate-read", "too-few-pieces"],
)
def test_compiled_loops_it_cannot_prove_or_that_are_short_stay_stock_and_right(fn, n):
    x, w = torch.randn(n, H), torch.randn(V, H)
    compiled = compile_and_run(fn, x, w)
    assert compiled.events("slice_writes") == {}
    out, expected = compiled.result, fn(x.double(), w.double())
    for o, e in zip(out if isinstance(out, tuple) else (out,), expected if isinstance(expected, tuple) else (expected,)):
        assert_close_to_float64(o, e)


def test_symbolic_sizes_compile_stock_and_right():
    x, w = torch.randn(MANY * 4, H), torch.randn(V, H)
    compiled = compile_and_run(chunked_grad_input, x, w, 4, dynamic=True)
    # dynamic=True: the chain's bounds are symbolic; the pass does not guess.
    assert compiled.events("slice_writes") == {}
    assert_close_to_float64(compiled.result, reference(x, w, 4))
