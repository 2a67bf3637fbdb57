"""On a Hopper GPU: the package's accumulate kernel adds the product into C, as cuBLAS does
within cuBLAS's own error against float64, deterministically, at every tile edge; and a
compiled accumulation chain of Liger's shapes runs it, in place, where it applies."""

import pytest
import torch

from helpers import allocations, compile_and_run
from workloads import accumulate_in_chunks

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
