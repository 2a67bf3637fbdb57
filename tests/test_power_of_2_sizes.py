"""Dynamo finds Triton's ``next_power_of_2`` of a chunk size (a size divided into parts)
by comparisons: the same value, a constant for every size of its power-of-two range, no
bitwise nest in the graph's sizes (which Inductor's index simplification takes minutes
over).  Other arguments keep Triton's expression and the stock number of graphs."""

from unittest import mock

import pytest
import torch
import torch._inductor.compile_fx  # noqa: F401  (the features here apply once Inductor is imported)
from hypothesis import given, strategies as st
from torch._dynamo.utils import counters
from torch._dynamo.variables.functions import UserFunctionVariable

import inductor_addmm_fix
from inductor_addmm_fix.dynamo import power_of_2_sizes
from workloads import flce_in_power_of_2_chunks, next_power_of_2


def first_chunk(x):
    """Liger's chunk size: the rows rounded up to a power of two, over 8."""
    chunk = next_power_of_2((x.shape[0] + 7) // 8)
    return x[:chunk] * 2


def redirected():
    """Dynamo's calls of :func:`next_power_of_2` redirected, as the feature redirects
    Triton's."""
    stock = UserFunctionVariable.call_function
    return mock.patch.object(UserFunctionVariable, "call_function", power_of_2_sizes.redirect(stock, lambda: (next_power_of_2,)))


def graph_sizes(gm) -> str:
    """The values of a Dynamo graph (their sizes included) as text."""
    return " ".join(str(n.meta.get("example_value", "")) for n in gm.graph.nodes)


def compile_with_sizes(fn):
    """``fn`` compiled with dynamic shapes; returns (compiled function, the sizes of
    every graph's values as text)."""
    sizes = []

    def backend(gm, example_inputs):
        sizes.append(graph_sizes(gm))
        return gm.forward

    return torch.compile(fn, backend=backend, dynamic=True), sizes


def graphs_over(compiled, fn, calls, **config):
    """Calls ``compiled`` with each argument tuple of ``calls``, Dynamo's calls of
    :func:`next_power_of_2` redirected and ``config`` set, each result equal to ``fn``'s;
    returns the number of graphs compiled."""
    counters.clear()
    with redirected(), torch._dynamo.config.patch(**config):
        for args in calls:
            torch.testing.assert_close(compiled(*args), fn(*args), rtol=0, atol=0)
    return counters["stats"]["unique_graphs"]


@given(st.integers(min_value=-3, max_value=2**40))
def test_comparisons_give_triton_s_value(n):
    assert power_of_2_sizes.next_power_of_2_by_comparisons(n) == next_power_of_2(n)


def test_the_chunk_size_is_a_constant_of_the_size_s_range():
    compiled, sizes = compile_with_sizes(first_chunk)
    calls = [(torch.randn(rows, 3),) for rows in (188, 170, 192, 175)]
    assert graphs_over(compiled, first_chunk, calls) == 1  # all four in (128, 256]: chunk 32
    assert "bitwise" not in sizes[0].lower()


def test_the_rows_of_a_flattened_batch_are_a_size_too():
    def first_chunk_of_rows(x):  # Liger: BT, H = x.view(-1, H).shape
        return first_chunk(x.view(-1, x.shape[-1]))

    compiled, sizes = compile_with_sizes(first_chunk_of_rows)
    calls = [(torch.randn(batch, seq, 3),) for batch, seq in ((2, 94), (5, 34), (4, 48))]  # 188, 170, 192 rows
    assert graphs_over(compiled, first_chunk_of_rows, calls) == 1
    assert "bitwise" not in sizes[0].lower()


def test_a_size_divided_by_a_symbolic_int_is_a_chunk_size():
    def first_chunk_per(x, per: int):  # Liger 0.8.5: cdiv(BT, inc_factor), chunk_mem_const an int
        return x[: next_power_of_2((x.shape[0] + per - 1) // per)] * 2

    compiled, sizes = compile_with_sizes(first_chunk_per)
    calls = [(torch.randn(rows, 3), 8) for rows in (188, 170, 192)]
    assert graphs_over(compiled, first_chunk_per, calls) == 1
    assert "bitwise" not in sizes[0].lower()


def test_a_size_in_another_range_recompiles_once_and_is_right():
    compiled, _ = compile_with_sizes(first_chunk)
    calls = [(torch.randn(rows, 3),) for rows in (188, 40, 33)]
    assert graphs_over(compiled, first_chunk, calls) == 2  # (128, 256], then (32, 64]


def scaled_by_block_size(x):
    """A kernel's block size: a dimension rounded up to a power of two, clipped."""
    return x * min(max(next_power_of_2(x.shape[0]), 128), 4096)


def scaled_by_rows_power_of_2(x):
    return x[: x.shape[0] // 2] * next_power_of_2(x.shape[0])


@pytest.mark.parametrize("fn", [scaled_by_block_size, scaled_by_rows_power_of_2], ids=["clipped", "scalar"])
def test_a_dimension_not_divided_keeps_triton_s_expression_and_one_dynamic_graph(fn):
    calls = [(torch.randn(rows),) for rows in (100, 300, 700, 1500, 3000, 6000)]  # six power-of-two ranges
    # the first size, then dynamic shapes; comparisons: one per range
    assert graphs_over(torch.compile(fn, backend="eager"), fn, calls) == 2


def scaled_by_power_of_2(x, n):
    """A data-dependent size: ``n.item()`` rounded up to a power of two."""
    k = n.item()
    torch._check(k >= 1)
    torch._check(k <= 1024)
    return x * next_power_of_2(k)


def scaled_by_int(x, n: int):
    return x * next_power_of_2(n)


def test_a_value_read_with_item_keeps_triton_s_expression_and_one_graph():
    compiled = torch.compile(scaled_by_power_of_2, backend="eager", fullgraph=True)
    calls = [(torch.randn(4), torch.tensor(n)) for n in (37, 100, 3)]
    # comparisons would compile one graph per range
    assert graphs_over(compiled, scaled_by_power_of_2, calls, capture_scalar_outputs=True) == 1


def test_a_symbolic_int_keeps_triton_s_expression():
    calls = [(torch.randn(4), n) for n in (5, 9, 37, 100)]
    # static, then one dynamic graph for the rest
    assert graphs_over(torch.compile(scaled_by_int, backend="eager"), scaled_by_int, calls) == 2


def test_stock_dynamo_carries_the_bitwise_nest_into_the_graph():
    compiled, sizes = compile_with_sizes(first_chunk)
    compiled(torch.randn(188, 3))
    assert "bitwise" in sizes[0].lower()


def test_the_probe_tells_the_bitwise_nest_from_comparisons():
    assert power_of_2_sizes.builds_bitwise_nest(next_power_of_2)
    assert not power_of_2_sizes.builds_bitwise_nest(power_of_2_sizes.next_power_of_2_by_comparisons)


def test_the_feature_applies_where_triton_is_installed():
    state = inductor_addmm_fix.status().features["power_of_2_sizes"]
    if power_of_2_sizes.triton_next_power_of_2() is None:
        assert state.startswith("unavailable") and "Triton is not installed" in state
    else:
        assert state == "applied"
        wrappers, wrapper = [], UserFunctionVariable.call_function
        while getattr(wrapper, "splices", False):
            wrappers.append(wrapper.__module__)
            wrapper = wrapper.stock
        assert power_of_2_sizes.__name__ in wrappers


@pytest.mark.skipif(power_of_2_sizes.triton_next_power_of_2() is None, reason="needs triton")
def test_triton_s_own_function_is_redirected():
    import triton

    def chunk(x):
        return x[: triton.next_power_of_2((x.shape[0] + 7) // 8)] * 2

    counters.clear()
    compiled = torch.compile(chunk, backend="eager", dynamic=True)
    for rows in (188, 170):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(compiled(x), chunk(x), rtol=0, atol=0)
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic-dynamic", "dynamic"])
def test_a_training_loop_over_changing_row_counts_compiles_twice_and_is_right(dynamic):
    """Liger FLCE's forward (its chunk sizes, ``capture_scalar_outputs``), a new row
    count at each step, compiled by Inductor: stock Inductor takes minutes over the
    bitwise nest in the compile for dynamic shapes (over 150 s here, not finished)."""
    from torch._inductor.compile_fx import compile_fx

    def inductor(gm, example_inputs):
        assert "bitwise" not in graph_sizes(gm).lower(), "the chunk bounds carry Triton's bitwise nest"
        return compile_fx(gm, example_inputs)

    h, v = 4, 64  # chunks of next_power_of_2(rows / cdiv(64, 2 * 4)) rows: 6 of 32 at every row count below
    w = torch.randn(v, h) / 4
    compiled = torch.compile(flce_in_power_of_2_chunks, backend=inductor, dynamic=dynamic)
    counters.clear()
    with redirected(), torch._dynamo.config.patch(capture_scalar_outputs=True):
        for rows in (188, 170, 192, 175):
            x, target = torch.randn(rows, h), torch.randint(v, (rows,))
            got = compiled(x, w, target, 2)
            want = flce_in_power_of_2_chunks(x.double(), w.double(), target, 2)
            for g, e in zip(got, want):
                assert g.dtype == torch.float32
                torch.testing.assert_close(g, e.float(), rtol=1e-5, atol=1e-6)
    # automatic dynamic: the first row count, then dynamic shapes; dynamic=True: one
    assert counters["stats"]["unique_graphs"] == (2 if dynamic is None else 1)


@pytest.mark.skipif(power_of_2_sizes.triton_next_power_of_2() is None, reason="needs triton")
def test_liger_s_chunk_size_reaches_the_graph_without_the_bitwise_nest():
    liger = pytest.importorskip("liger_kernel.transformers.functional", reason="needs liger-kernel")
    sizes = []

    def first_graph_only(gm, example_inputs):  # tracing is what is tested: Liger's kernels need a GPU
        sizes.append(graph_sizes(gm))
        raise RuntimeError("traced")

    def head(x, w, target):
        return liger.liger_fused_linear_cross_entropy(x, w, target, reduction="mean")

    x, w = torch.randn(188, 64, dtype=torch.bfloat16), torch.randn(512, 64, dtype=torch.bfloat16)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="traced"):
        torch.compile(head, backend=first_graph_only, dynamic=True)(x, w, torch.randint(512, (188,)))
    assert "bitwise" not in sizes[0].lower()


def graphs_per_call(row_counts, h: int = 4, v: int = 36) -> list[int]:
    """Graphs compiled so far after each call of Liger's forward loop (chunks of
    ``next_power_of_2(cdiv(rows, cdiv(v, h)))`` rows) at each row count (see
    :func:`graphs_over`)."""
    w = torch.randn(v, h)
    compiled = torch.compile(flce_in_power_of_2_chunks, backend="aot_eager")
    total, graphs = 0, []
    for rows in row_counts:
        total += graphs_over(compiled, flce_in_power_of_2_chunks, [(torch.randn(rows, h), w, torch.randint(v, (rows,)))])
        graphs.append(total)
    return graphs


@pytest.mark.slow
def test_power_of_two_row_counts_compile_the_loop_once_each():
    # cdiv(36, 4) = 9: 8 chunks at every power of two from 16 rows, of 2, 4, 8, 16 rows (a
    # constant per range): one graph each, none for a count met before (README, "Compile time")
    graphs = graphs_per_call([16, 32, 64, 128, 32, 64])
    assert graphs[2:] == [graphs[1] + 1, graphs[1] + 2, graphs[1] + 2, graphs[1] + 2], graphs


@pytest.mark.slow
def test_a_new_number_of_chunks_compiles_the_unrolled_loop_again():
    # 8, 6, 5 chunks: Dynamo unrolls the loop and guards on its count, as stock torch does
    graphs = graphs_per_call([16, 32, 24, 40])
    assert graphs[1] < graphs[2] < graphs[3], graphs
