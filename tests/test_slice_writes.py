"""Tier 2f (issue 8): chunked writes into slices of one buffer are slice-sized.

FLCE writes each chunk's input gradient with ``torch.mm(g, W, out=grad_input[a:b])``.
Stock Inductor turns the loop into a chain of ``slice_scatter`` kernels over the whole
buffer; with the pass each chunk's matmul writes straight into its rows of the result."""

from __future__ import annotations

import re

import pytest
import torch
import torch._inductor.compile_fx  # noqa: F401  (Tier 2 is applied once Inductor is imported)
import torch._inductor.config as inductor_config
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

from inductor_addmm_fix import tier2_inductor_post_grad as t2p
from inductor_addmm_fix import tier2_inductor_slice_writes as t2f
from inductor_addmm_fix.tier2_inductor_lowerings import COUNTER

pytestmark = pytest.mark.skipif(not t2p.supported(), reason="no post_grad_custom_post_pass in this torch")

H, V = 16, 24
MANY = 12  # chunks: above Inductor's max_pointwise_cat_inputs (8)


def chunked_grad_input(x, w, chunk):
    """FLCE's grad_input loop: each chunk's product written into its rows."""
    grad_input = torch.zeros_like(x)
    for start in range(0, x.shape[0], chunk):
        g = torch.tanh(x[start : start + chunk] @ w.t())
        torch.mm(g, w, out=grad_input[start : start + chunk])
    return grad_input


def compile_and_code(fn, *args, with_pass=True, dynamic=False):
    torch._dynamo.reset()
    counters[COUNTER].clear()
    value = t2p.make_chained_pass(None) if with_pass else None
    with inductor_config.patch(force_disable_caches=True, post_grad_custom_post_pass=value):
        out, codes = run_and_get_code(torch.compile(fn, dynamic=dynamic), *args)
    counts = {k.split(":", 1)[1]: n for k, n in counters[COUNTER].items() if k.startswith("slice_writes:")}
    return out, codes[0], counts


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
    out, code, counts = compile_and_code(chunked_grad_input, x, w, chunk)
    chunks = -(-bt // chunk)
    assert counts == {"chains": 1, "pieces": chunks, "cat": 1}
    full = [offsets for offsets in slices_written_in_place(code, chunk).values()]
    assert len(full) == 1 and full[0] == [k * chunk for k in range(bt // chunk)]
    assert out.dtype == dtype
    assert_close_to_float64(out, reference(x, w, chunk))


def test_stock_inductor_writes_through_whole_buffer_kernels():
    """The control: without the pass no matmul writes into the result's rows."""
    x, w = torch.randn(MANY * 4, H), torch.randn(V, H)
    _, code, counts = compile_and_code(chunked_grad_input, x, w, 4, with_pass=False)
    assert counts == {} and slices_written_in_place(code, 4) == {}


def test_results_are_bitwise_those_of_stock_inductor():
    x, w = torch.randn(MANY * 4, H), torch.randn(V, H)
    ours, _, counts = compile_and_code(chunked_grad_input, x, w, 4)
    stock, _, _ = compile_and_code(chunked_grad_input, x, w, 4, with_pass=False)
    assert counts["chains"] == 1 and torch.equal(ours, stock)


def gaps_and_a_prefilled_buffer(x, w, buf):
    """Writes every other chunk into a buffer with data in it: the gaps keep that data."""
    out = buf * 2
    for k in range(0, 2 * MANY, 2):
        torch.mm(x[k * 2 : k * 2 + 2] @ w.t(), w, out=out[k * 2 : k * 2 + 2])
    return out


def test_gaps_keep_what_the_buffer_held():
    x, w, buf = torch.randn(MANY * 4 + 3, H), torch.randn(V, H), torch.randn(MANY * 4 + 3, H)
    out, _, counts = compile_and_code(gaps_and_a_prefilled_buffer, x, w, buf)
    assert counts == {"chains": 1, "pieces": MANY, "cat": 1}  # the cat also holds the gaps
    expected = gaps_and_a_prefilled_buffer(x.double(), w.double(), buf.double())
    assert_close_to_float64(out, expected)


def into_a_graph_input(grad_input, x, w, chunk):
    """FLCE when grad_input comes from an earlier graph (Liger's .item() breaks the
    graph): its chunks are written into slices of a graph input, every other chunk
    here so that gaps must keep the input's data."""
    for start in range(0, x.shape[0], 2 * chunk):
        torch.mm(torch.tanh(x[start : start + chunk] @ w.t()), w, out=grad_input[start : start + chunk])
    return grad_input.sum()


@pytest.mark.parametrize("chunk", [4, 3])
def test_writes_into_a_graph_input_go_straight_into_its_slices(chunk):
    bt = MANY * 8
    x, w, start = torch.randn(bt, H), torch.randn(V, H) / 4, torch.randn(bt, H)
    buf = start.clone()
    total, code, counts = compile_and_code(into_a_graph_input, buf, x, w, chunk)
    writes = -(-bt // (2 * chunk))
    assert counts == {"chains": 1, "pieces": writes, "in_place": 1}
    # No buffer of the input's size: neither a cat nor a copy of the whole input.
    assert f"empty_strided_cpu(({bt}, {H})" not in code
    expected = start.double()
    expected_total = into_a_graph_input(expected, x.double(), w.double(), chunk)
    assert_close_to_float64(buf, expected)
    assert_close_to_float64(total, expected_total)


def test_stock_inductor_copies_a_whole_graph_input():
    """The control: without the pass the input's size is allocated and copied back."""
    bt = MANY * 8
    x, w, buf = torch.randn(bt, H), torch.randn(V, H), torch.randn(bt, H)
    _, code, counts = compile_and_code(into_a_graph_input, buf, x, w, 4, with_pass=False)
    assert counts == {} and f"empty_strided_cpu(({bt}, {H})" in code


def a_graph_input_read_elsewhere(grad_input, x, w):
    before = grad_input.sum()  # the input's old value has a reader besides the writes
    for start in range(0, x.shape[0], 4):
        torch.mm(x[start : start + 4] @ w.t(), w, out=grad_input[start : start + 4])
    return before


def test_a_graph_input_read_elsewhere_is_not_written_in_place():
    x, w, start = torch.randn(MANY * 4, H), torch.randn(V, H) / 4, torch.randn(MANY * 4, H)
    buf = start.clone()
    before, _, counts = compile_and_code(a_graph_input_read_elsewhere, buf, x, w)
    assert "in_place" not in counts
    assert_close_to_float64(before, start.double().sum())
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
    (first, out), _, counts = compile_and_code(two_chains_one_after_the_other, x, w)
    assert counts == {"chains": 2, "pieces": MANY + MANY // 2, "cat": 2}
    first_ref, out_ref = two_chains_one_after_the_other(x.double(), w.double())
    assert_close_to_float64(first, first_ref)
    assert_close_to_float64(out, out_ref)


def overlapping(x, w):
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
    [(overlapping, MANY * 2 + 2), (reads_mid_loop, MANY * 2), (few_chunks, 16)],
    ids=["overlapping-writes", "intermediate-read", "too-few-pieces"],
)
def test_chains_it_cannot_prove_are_left_alone(fn, n):
    x, w = torch.randn(n, H), torch.randn(V, H)
    out, _, counts = compile_and_code(fn, x, w)
    assert counts == {}
    expected = fn(x.double(), w.double())
    for o, e in zip(out if isinstance(out, tuple) else (out,), expected if isinstance(expected, tuple) else (expected,)):
        assert_close_to_float64(o, e)


def test_symbolic_sizes_are_left_alone():
    x, w = torch.randn(MANY * 4, H), torch.randn(V, H)
    torch._dynamo.reset()
    out, _, counts = compile_and_code(chunked_grad_input, x, w, 4, dynamic=True)
    # dynamic=True: the chain's bounds are symbolic; the pass does not guess.
    assert counts == {}
    assert_close_to_float64(out, reference(x, w, 4))


def test_the_pass_never_raises(monkeypatch):
    def broken(chain):
        raise RuntimeError("unexpected graph")

    monkeypatch.setattr(t2f, "plan_cat", broken)
    counters[COUNTER].clear()
    graph = torch.fx.symbolic_trace(lambda a: a + 1).graph
    before = str(graph)
    assert t2f.rewrite_slice_writes(graph) == 0 and str(graph) == before

    x, w = torch.randn(MANY * 4, H), torch.randn(V, H)
    out, _, counts = compile_and_code(chunked_grad_input, x, w, 4)
    assert counts == {"error": 1}
    assert_close_to_float64(out, reference(x, w, 4))
