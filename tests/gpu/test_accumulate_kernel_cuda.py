"""On a Hopper GPU: the package's accumulate kernel adds the product into C, as cuBLAS does
within cuBLAS's own error against float64, deterministically, at every tile edge; and a
compiled accumulation chain of Liger's shapes runs it, in place, where it applies."""

import pytest
import torch

from helpers import allocations, compile_and_run
from workloads import accumulate_in_chunks, accumulate_separate_chunks

from inductor_addmm_fix.inductor import hopper_accumulate

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs a Hopper GPU"
)

# (M, N, K): tile multiples; M, N, K off the tile (128, 128, 64); K = 1; one tile.
EDGES = [(1024, 512, 256), (1000, 136, 70), (2056, 904, 300), (512, 256, 1), (128, 128, 64), (8, 8, 8)]
GEMMA = (256000, 2304, 128)  # Gemma-2's head (V, H) at 8192 tokens, chunks of 128 rows


def step(m, n, k, c_dtype):
    g = torch.randn(k, m, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    return torch.randn(m, n, device="cuda", dtype=c_dtype), g.t(), x


def error(c, start, a, b) -> float:
    want = start.double() + a.double() @ b.double()
    return ((c.double() - want).norm() / want.norm()).item()


def cublas(start, a, b):
    kw = {"out_dtype": torch.float32} if start.dtype == torch.float32 else {}
    return torch.addmm(start, a, b, **kw)


@pytest.mark.parametrize("c_dtype", [torch.float32, torch.bfloat16], ids=["fp32 C", "bf16 C"])
@pytest.mark.parametrize("shape", EDGES, ids=lambda s: "x".join(map(str, s)))
def test_the_kernel_adds_the_product_as_cublas_does(shape, c_dtype):
    start, a, b = step(*shape, c_dtype)
    c = start.clone()
    hopper_accumulate.accumulate(c, a, b)
    assert error(c, start, a, b) <= 1.05 * error(cublas(start, a, b), start, a, b) + 1e-7


def test_the_kernel_is_deterministic():
    start, a, b = step(2056, 904, 300, torch.float32)
    first, second = start.clone(), start.clone()
    hopper_accumulate.accumulate(first, a, b)
    hopper_accumulate.accumulate(second, a, b)
    assert torch.equal(first, second)


@pytest.mark.parametrize("c_dtype", [torch.float32, torch.bfloat16], ids=["fp32 C", "bf16 C"])
@pytest.mark.parametrize("shape", EDGES, ids=lambda s: "x".join(map(str, s)))
def test_the_pair_kernel_adds_both_products_within_cublas_s_error(shape, c_dtype):
    """A bf16 C: within the error of cuBLAS's one step over both chunks' rows (what
    ``accumulate_pairs`` makes of a pair without the kernel) and of two cuBLAS steps
    (which round C twice).  An fp32 C: within four fp32 rounding units of the exact sum.
    There cuBLAS lands one or two from it (1.3e-7 over both chunks' rows, 2.0-2.4e-7 in
    two steps, measured at these edges) and the kernel's fp32 sum of both products three
    or four (3.6e-7, 4.2e-7): far under the bf16 operands' own error in a gradient
    (about 2e-3), which is why the FLCE rows' gradient errors match eager's."""
    m, n, k = shape
    start, a, b = step(m, n, k, c_dtype)
    _, a2, b2 = step(m, n, k // 2 + 3, c_dtype)  # another K, off the tile
    c = start.clone()
    hopper_accumulate.accumulate_pair(c, a, b, a2, b2)
    want = start.double() + a.double() @ b.double() + a2.double() @ b2.double()
    err = lambda got: ((got.double() - want).norm() / want.norm()).item()  # noqa: E731
    if c_dtype == torch.float32:
        assert err(c) <= 4 * torch.finfo(torch.float32).eps
    else:
        assert err(c) <= 1.05 * err(cublas(start, torch.cat([a, a2], dim=1), torch.cat([b, b2])))
        assert err(c) <= 1.05 * err(cublas(cublas(start, a, b), a2, b2))


def test_the_pair_kernel_is_deterministic():
    start, a, b = step(2056, 904, 300, torch.bfloat16)
    _, a2, b2 = step(2056, 904, 77, torch.bfloat16)
    first, second = start.clone(), start.clone()
    hopper_accumulate.accumulate_pair(first, a, b, a2, b2)
    hopper_accumulate.accumulate_pair(second, a, b, a2, b2)
    assert torch.equal(first, second)


@pytest.mark.parametrize("c_dtype", [torch.float32, torch.bfloat16], ids=["fp32 C", "bf16 C"])
def test_liger_s_step_is_taken(c_dtype):
    assert hopper_accumulate.supports(*step(128256, 4096, 256, c_dtype))
    assert hopper_accumulate.supports(*step(*GEMMA, c_dtype))


def gemma_chain(chunks: int, out_dtype):
    """Gemma-2's head at 128 rows a chunk: (start, grad logits, x, kwargs)."""
    m, n, k = GEMMA
    g = torch.randn(k * chunks, m, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(k * chunks, n, device="cuda", dtype=torch.bfloat16)
    start = torch.randn(m, n, device="cuda", dtype=out_dtype or torch.bfloat16)
    return start, g, x, ({"out_dtype": out_dtype} if out_dtype else {})


@pytest.mark.features("-accumulate_pairs")
@pytest.mark.parametrize("out_dtype", [torch.float32, None], ids=["fp32 accumulator", "bf16 accumulator"])
def test_a_compiled_chain_of_liger_s_shapes_runs_the_kernel_in_place(out_dtype):
    """Gemma-2's head at 8192 tokens, chunks of 128 rows (four of them)."""
    (m, n, k), chunks = GEMMA, 4
    start, g, x, kwargs = gemma_chain(chunks, out_dtype)
    buf = start.clone()
    before = hopper_accumulate.runs["kernel"]
    compiled = compile_and_run(lambda b, g, x: accumulate_in_chunks(b, g, x, k, **kwargs), buf, g, x)
    assert hopper_accumulate.runs["kernel"] - before == chunks
    assert compiled.result is buf and allocations(compiled.code, (m, n)) == 0
    eager = start.clone()
    accumulate_in_chunks(eager, g, x, k, **kwargs)
    assert error(buf, start, g.t(), x) <= 1.05 * error(eager, start, g.t(), x) + 1e-7


@pytest.mark.features("-accumulate_pairs,-accumulate_kernel")
def test_with_the_feature_off_cublas_runs_the_chain():
    start, g, x, kwargs = gemma_chain(2, torch.float32)
    before = hopper_accumulate.runs["kernel"]
    compiled = compile_and_run(lambda b, g, x: accumulate_in_chunks(b, g, x, GEMMA[2], **kwargs), start, g, x)
    assert hopper_accumulate.runs["kernel"] == before
    assert "addmm.dtype:hopper_accumulate" not in compiled.counts


@pytest.mark.features("-accumulate_pairs")
def test_a_chain_in_a_cuda_graph_runs_the_kernel_at_each_replay():
    """mode="reduce-overhead" with the accumulator made in the graph (as Liger makes
    grad_weight): the kernel is captured, and each replay on new operands adds their
    product, within cuBLAS's error."""
    from torch._dynamo.utils import counters

    _, g, x, kwargs = gemma_chain(2, torch.float32)

    def chain(g, x):
        grad_weight = torch.zeros(g.shape[1], x.shape[1], device="cuda", dtype=torch.float32)
        return accumulate_in_chunks(grad_weight, g, x, GEMMA[2], **kwargs)

    torch._dynamo.reset()
    counters["inductor"].clear()
    fn = torch.compile(chain, mode="reduce-overhead")
    before = hopper_accumulate.runs["kernel"]
    for _ in range(4):  # warm-up, record, then replays on new operands
        g.normal_()
        x.normal_()
        torch.compiler.cudagraph_mark_step_begin()
        got = fn(g, x).clone()
        assert error(got, torch.zeros_like(got), g.t(), x) <= 1.05 * error(chain(g, x), torch.zeros_like(got), g.t(), x) + 1e-7
    runs = hopper_accumulate.runs["kernel"] - before
    assert runs == 2 * 2, runs  # two chunks when warming up and when recording; replays launch from the graph
    assert counters["inductor"]["cudagraph_skips"] == 0


@pytest.mark.features("-accumulate_pairs")
@pytest.mark.parametrize("out_dtype", [torch.float32, None], ids=["fp32 accumulator", "bf16 accumulator"])
def test_a_chain_with_symbolic_sizes_runs_the_kernel(out_dtype):
    start, g, x, kwargs = gemma_chain(3, out_dtype)
    buf = start.clone()
    before = hopper_accumulate.runs["kernel"]
    compiled = compile_and_run(lambda b, g, x: accumulate_in_chunks(b, g, x, GEMMA[2], **kwargs), buf, g, x, dynamic=True)
    assert hopper_accumulate.runs["kernel"] - before == 3
    assert compiled.result is buf
    eager = start.clone()
    accumulate_in_chunks(eager, g, x, GEMMA[2], **kwargs)
    assert error(buf, start, g.t(), x) <= 1.05 * error(eager, start, g.t(), x) + 1e-7


@pytest.mark.parametrize("out_dtype", [torch.float32, None], ids=["fp32 accumulator", "bf16 accumulator"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_compiled_chain_of_separate_chunks_runs_the_pair_kernel_without_a_cat(out_dtype, dynamic):
    """Gemma-2's head at 128 rows a chunk, each chunk's gradient its own tensor (as
    Liger's): ``accumulate_pairs`` merges each pair into one step of the pair kernel,
    reading both chunks where they lie (no [256, V] copy), in place."""
    (m, n, k), chunks = GEMMA, 4
    start, g, x, kwargs = gemma_chain(chunks, out_dtype)
    gs = [piece.clone() for piece in g.split(k)]
    buf = start.clone()
    before = dict(hopper_accumulate.runs)
    compiled = compile_and_run(lambda b, gs, x: accumulate_separate_chunks(b, gs, x, **kwargs), buf, gs, x,
                               dynamic=dynamic)
    assert compiled.events("accumulate_pairs") == {"chains": 1, "pairs": 2, "split": 2}
    assert hopper_accumulate.runs["pair"] - before["pair"] == chunks // 2
    assert hopper_accumulate.runs["kernel"] == before["kernel"]
    assert compiled.result is buf and allocations(compiled.code, (m, n)) == 0
    assert "cat" not in compiled.code and "# alias" not in compiled.code  # no cat of a pair's chunks
    eager = start.clone()
    accumulate_in_chunks(eager, g, x, k, **kwargs)
    assert error(buf, start, g.t(), x) <= 1.05 * error(eager, start, g.t(), x) + 1e-7
