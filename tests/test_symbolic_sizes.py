"""The package rewrites a graph with symbolic sizes as it rewrites the static one.

Training changes shapes: after the first new row count Dynamo compiles the frame again
with symbolic sizes (automatic dynamic shapes), and from then on every step runs that
graph; ``dynamic=True`` and ``torch._dynamo.mark_dynamic`` start there.  Each pass and
lowering that fires on Liger FLCE's static loop graph must fire on its symbolic one,
with results of a float64 run: a pass that silently declined symbolic bounds (the
``grad_input`` writes) made the dynamic step slower and larger than eager's."""

from __future__ import annotations

import dataclasses
import functools
import re

import pytest
import torch
from torch._dynamo.utils import counters

from helpers import call_again, compile_and_run, many_recompiles, unavailable_features, without_graph_caches
from workloads import chunks_through_one_logits_buffer, flce_in_power_of_2_chunks, flce_with_a_graph_break

from inductor_addmm_fix.inductor.passes import post_grad_slot
from inductor_addmm_fix.patching.counters import COUNTER

pytestmark = pytest.mark.skipif(not post_grad_slot.supported(), reason="no post_grad_custom_post_pass in this torch")

H, V = 16, 64  # Liger's chunks: next_power_of_2(cdiv(BT, V / H)) rows
ROWS, OTHER_ROWS = 48, 88  # 3 chunks of 16 rows; 3 of 32, the last one cut


def inputs(rows: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, H, generator=g).to(torch.bfloat16)
    w = (torch.randn(V, H, generator=g) / 4).to(torch.bfloat16)
    return x, w, torch.randint(V, (rows,), generator=g)


def flce(x, w, target):
    return flce_in_power_of_2_chunks(x, w, target, accum_dtype=torch.float32)


PASSES = ("slice_writes:", "accumulate_pairs:", "chunk_order:")


def events(counts: dict) -> set:
    """Which graph pass or lowering did what ("slice_writes:in_place", "addmm.dtype:...")
    to the graphs, not how often (other features count events of their own)."""
    return {
        key
        for key, n in counts.items()
        if n and not key.endswith(":error") and (key.startswith(PASSES) or ".dtype:" in key)
    }


def assert_like_float64(result, x, w, target):
    want = flce_in_power_of_2_chunks(x.double(), w.double(), target)
    for got, expected, dtype in zip(result, want, (torch.float32, torch.bfloat16, torch.float32)):
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), expected, rtol=3e-2, atol=3e-3)


def pieces_of_buffers(codes: list) -> int:
    """Views of one buffer written piece by piece (a cat's inputs; ``# alias`` lines of
    the generated code): every copy a merged pair makes of a chunk lands in one."""
    return sum(code.count("# alias") for code in codes)


@pytest.fixture(scope="module")
def static_graph():
    x, w, target = inputs(ROWS, 0)
    compiled = compile_and_run(flce, x, w, target, fullgraph=False)
    assert_like_float64(compiled.result, x, w, target)
    found = events(compiled.counts)
    assert {"slice_writes:in_place", "accumulate_pairs:pairs"} <= found, found  # the control: the passes have work
    assert any(key.startswith("addmm.dtype:") for key in found), found
    return found, pieces_of_buffers(compiled.codes)


@pytest.fixture(scope="module")
def static_events(static_graph):
    return static_graph[0]


def is_symbolic(codes: list) -> bool:
    """Whether a graph's inputs have symbolic sizes (``assert_size_stride(arg0_1, (s77, 16), ...)``)."""
    return any(re.search(r"assert_size_stride\(\w+, \([^)]*\bs\d+\b", code) for code in codes)


@pytest.fixture(scope="module")
def automatic_graph():
    """The recompile at a second row count (torch.compile's default: automatic dynamic
    shapes), and the inputs of that call."""
    compiled = compile_and_run(flce, *inputs(ROWS, 1), fullgraph=False, dynamic=None)
    x, w, target = inputs(OTHER_ROWS, 2)
    again = call_again(compiled, x, w, target)
    assert is_symbolic(again.codes)  # the control: the recompile has symbolic sizes
    return again, (x, w, target)


def test_the_automatic_dynamic_graph_is_rewritten_as_the_static_one(static_events, automatic_graph):
    again, (x, w, target) = automatic_graph
    assert events(again.counts) == static_events
    assert_like_float64(again.result, x, w, target)


def test_the_automatic_dynamic_graph_copies_no_more_than_the_static_one(static_graph, automatic_graph):
    """The merged pair reads its rows of ``x`` as one slice, as in the static graph: the
    chunks' symbolic bounds ``[k*c, min((k+1)*c, BT))`` are proven adjacent."""
    again, _ = automatic_graph
    assert pieces_of_buffers(again.codes) == static_graph[1]


def test_a_dynamic_true_graph_is_rewritten_as_the_static_one(static_events):
    x, w, target = inputs(OTHER_ROWS, 3)
    compiled = compile_and_run(flce, x, w, target, fullgraph=False, dynamic=True)
    assert is_symbolic(compiled.codes)
    assert events(compiled.counts) == static_events
    assert_like_float64(compiled.result, x, w, target)


def test_a_graph_with_the_token_dimension_marked_dynamic_is_rewritten_as_the_static_one(static_events):
    x, w, target = inputs(OTHER_ROWS, 4)
    torch._dynamo.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(target, 0)
    compiled = compile_and_run(flce, x, w, target, fullgraph=False)
    assert is_symbolic(compiled.codes)
    assert events(compiled.counts) == static_events
    assert_like_float64(compiled.result, x, w, target)


def test_chunks_written_into_one_buffer_are_read_back_without_copying_it():
    """Liger's logits buffer: each chunk written into its first rows and read back.  The
    symbolic graph reads the chunk itself, as the static one does, instead of a copy of
    the whole buffer per chunk (the prefix is not provably all of it)."""
    g = torch.Generator().manual_seed(7)
    first = (torch.randn(ROWS, H, generator=g), torch.randn(V, H, generator=g), torch.randint(V, (ROWS,), generator=g))
    x, w, target = torch.randn(OTHER_ROWS, H, generator=g), torch.randn(V, H, generator=g), torch.randint(V, (OTHER_ROWS,), generator=g)
    compiled = compile_and_run(chunks_through_one_logits_buffer, *first, fullgraph=False, dynamic=None)
    again = call_again(compiled, x, w, target)
    assert is_symbolic(again.codes)
    assert again.events("slice_writes")["reads"] >= 3  # a chunk's logits read back, every chunk
    assert not re.search(rf"empty_strided_cpu\(\(s\d+, {V}\)", "".join(again.codes))  # no buffer of the storage's size
    want = chunks_through_one_logits_buffer(x.double(), w.double(), target)
    torch.testing.assert_close(again.result.double(), want, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- one graph, many row counts
@dataclasses.dataclass(frozen=True)
class Loop:
    """An FLCE loop to compile with ``dynamic=True``, and the row counts to call it at.
    ``chunk``: the rows per chunk (a constant of the graph); ``"argument"``: passed in, a
    symbolic int of the graph; ``"power of 2"``: Liger's, computed from the sizes."""

    chunk: int | str
    accum_dtype: torch.dtype | None

    def calls(self, generator: torch.Generator, n: int) -> list[tuple[int, int]]:
        """``n`` (rows, chunk) pairs of 3 or 4 chunks each, the last one whole in two of
        them and cut in the others."""
        picks = []
        for i in range(n):
            chunk = {"argument": int(torch.randint(3, 17, (), generator=generator)), "power of 2": 16}.get(self.chunk, self.chunk)
            rows = (3 + i % 2) * chunk if i < 2 else int(torch.randint(2 * chunk + 1, 4 * chunk + 1, (), generator=generator))
            picks.append((rows, chunk))
        return picks

    def function(self, accum_dtype=None):
        """The loop, of ``(x, w, target, chunk)`` where the chunk is an argument, else of
        ``(x, w, target)``."""
        if self.chunk == "power of 2":  # next_power_of_2(cdiv(rows, V / H)) rows: 16 for 33 to 64
            return functools.partial(flce_in_power_of_2_chunks, accum_dtype=accum_dtype)
        if self.chunk == "argument":
            return functools.partial(flce_with_a_graph_break, accum_dtype=accum_dtype)
        return functools.partial(flce_with_a_graph_break, chunk=self.chunk, accum_dtype=accum_dtype)

    def arguments(self, x, w, target, chunk) -> tuple:
        return (x, w, target, chunk) if self.chunk == "argument" else (x, w, target)


LOOPS = [Loop(chunk, accum) for chunk in (5, "argument", "power of 2") for accum in (None, torch.float32)]
CALLS = 8


@pytest.mark.slow
@pytest.mark.parametrize("loop", LOOPS, ids=lambda loop: f"chunk {loop.chunk}, accum {loop.accum_dtype}")
def test_a_symbolic_graph_matches_float64_at_every_row_count_it_serves(loop):
    """One compiled loop called at row counts of 3 and 4 chunks, the last chunk whole or
    cut, fresh inputs each time: the few graphs with symbolic sizes that serve them all,
    rewritten by the passes, match a float64 run at each."""
    generator = torch.Generator().manual_seed(11)
    compiled = torch.compile(loop.function(loop.accum_dtype), backend="inductor", dynamic=True)
    counters.clear()
    with many_recompiles(), without_graph_caches():
        for rows, chunk in loop.calls(generator, CALLS):
            x, w, target = inputs(rows, int(torch.randint(2**31 - 1, (), generator=generator)))
            result = compiled(*loop.arguments(x, w, target, chunk))
            want = loop.function()(*loop.arguments(x.double(), w.double(), target, chunk))
            for got, expected, dtype in zip(result, want, (torch.float32, torch.bfloat16, loop.accum_dtype or torch.bfloat16)):
                assert got.dtype == dtype
                torch.testing.assert_close(got.double(), expected, rtol=3e-2, atol=3e-3, msg=lambda m: f"{rows} rows, chunk {chunk}: {m}")
    found = events(dict(counters[COUNTER]))
    expected = {"slice_writes:in_place", "accumulate_pairs:pairs"}
    if "chunk_order" not in unavailable_features():
        expected.add("chunk_order:chunks")
    assert expected <= found, found  # the passes had work
    # the control: graphs served several calls (the frame before ``.item()`` has one; the
    # loop after it one per chunk count, and one more where the last chunk has 1 row)
    assert counters["stats"]["unique_graphs"] - 1 < CALLS
