"""On CUDA, every out_dtype overload compiled with Inductor equals eager bit for bit."""

import pytest
import torch

from cases import DTYPE_PAIRS, OPS, dtype_id, eager_fn, make_operands
from helpers import compile_and_run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

SHAPES = {
    "odd": (13, 17, 19),
    "K=1 (outer product)": (33, 1, 65),
    "N=1": (96, 64, 1),
    "M=N=1 (dot)": (1, 300, 1),
    "flce-chunk": (1024, 256, 512),
}


def assert_bitwise_equal(compiled, eager):
    assert compiled.dtype == eager.dtype
    assert compiled.shape == eager.shape
    diff = (compiled.double() - eager.double()).abs().max().item() if compiled.numel() else 0.0
    assert torch.equal(compiled, eager), f"max |compiled - eager| = {diff:.3g}"


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("pair", DTYPE_PAIRS, ids=dtype_id)
@pytest.mark.parametrize("op", OPS, ids=str)
def test_compiled_equals_eager(op, pair, shape):
    in_dtype, out_dtype = pair
    operands = make_operands(op, *shape, in_dtype, bias_dtype=out_dtype, device="cuda")
    fn = eager_fn(op, out_dtype=out_dtype)
    compiled = compile_and_run(fn, *operands)
    assert compiled.result.dtype == out_dtype
    assert_bitwise_equal(compiled.result, fn(*operands))


@pytest.mark.parametrize("pair", DTYPE_PAIRS, ids=dtype_id)
@pytest.mark.parametrize("op", OPS, ids=str)
def test_out_variant_equals_eager(op, pair):
    in_dtype, out_dtype = pair
    operands = make_operands(op, 64, 128, 96, in_dtype, bias_dtype=out_dtype, device="cuda")
    fn = eager_fn(op, out_dtype=out_dtype, use_out=True)
    if op.has_bias:
        compiled_buf, eager_buf = operands[0].clone(), operands[0].clone()
        compiled = compile_and_run(fn, compiled_buf, *operands[1:])
        fn(eager_buf, *operands[1:])
    else:
        shape = op.operand_shapes(64, 128, 96)[2]
        compiled_buf = torch.full(shape, float("nan"), device="cuda", dtype=out_dtype)
        eager_buf = compiled_buf.clone()
        compiled = compile_and_run(fn, *operands, compiled_buf)
        fn(*operands, eager_buf)
    assert compiled.lowered(op.name) >= 1, compiled.counts
    assert_bitwise_equal(compiled_buf, eager_buf)


@pytest.mark.parametrize("beta,alpha", [(0.5, 2.0), (0, 1), (0, 3.0), (-1.5, 0.25)])
@pytest.mark.parametrize("op", [o for o in OPS if o.has_bias], ids=str)
def test_beta_alpha_match_eager(op, beta, alpha):
    operands = make_operands(op, 64, 128, 96, torch.bfloat16, bias_dtype=torch.float32, device="cuda")
    if beta == 0:
        operands = (torch.full_like(operands[0], float("nan")), *operands[1:])
    fn = eager_fn(op, out_dtype=torch.float32, beta=beta, alpha=alpha)
    compiled = compile_and_run(fn, *operands)
    eager = fn(*operands)
    # cuBLAS folds alpha/beta into its epilogue with fused multiply-adds; the
    # compiled epilogue rounds each product: allow one fp32 rounding per term.
    torch.testing.assert_close(compiled.result, eager, rtol=2e-6, atol=1e-5)
    assert torch.isfinite(compiled.result).all()


@pytest.mark.parametrize("op", OPS, ids=str)
def test_the_product_is_the_cublas_out_dtype_kernel(op):
    operands = make_operands(op, 256, 512, 384, torch.bfloat16, bias_dtype=torch.float32, device="cuda")
    compiled = compile_and_run(eager_fn(op, out_dtype=torch.float32), *operands)
    assert compiled.lowered(op.product) == 1, compiled.counts
    assert ("bmm_dtype" if op.batched else "mm_dtype") in compiled.code
