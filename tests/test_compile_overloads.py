"""Every out_dtype overload compiles with Inductor on the CPU, reaches the plugin's
lowering, has out_dtype, and matches a float64 reference."""

import pytest
import torch

from cases import DTYPE_PAIRS, OPS, dtype_id, eager_fn, make_operands, relative_error, tolerance
from compile_helpers import compile_and_run

SHAPES = {
    "square": (16, 16, 16),
    "odd": (13, 17, 19),
    "tall-skinny": (65, 7, 3),
    "K=1 (outer product)": (9, 1, 11),
    "M=1": (1, 23, 5),
    "N=1": (6, 23, 1),
    "M=N=1 (dot)": (1, 31, 1),
    "1x1x1": (1, 1, 1),
}


def check(op, compiled, operands, ref_operands, in_dtype, out_dtype, **scalars):
    ref = op.reference(ref_operands, out_dtype, **scalars)
    out = compiled.result
    assert out.dtype == out_dtype
    assert out.shape == ref.shape
    assert torch.isfinite(out).all()
    err = relative_error(out, ref)
    assert err < tolerance(in_dtype, out_dtype), f"relative error {err:.3g}"


@pytest.mark.parametrize("pair", DTYPE_PAIRS, ids=dtype_id)
@pytest.mark.parametrize("op", OPS, ids=str)
def test_overload_matches_float64_reference(op, pair):
    in_dtype, out_dtype = pair
    operands = make_operands(op, 13, 17, 19, in_dtype, bias_dtype=out_dtype)
    compiled = compile_and_run(eager_fn(op, out_dtype=out_dtype), *operands)
    check(op, compiled, operands, operands, in_dtype, out_dtype)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("op", OPS, ids=str)
def test_small_and_odd_shapes_keep_out_dtype(op, shape):
    operands = make_operands(op, *shape, torch.bfloat16, bias_dtype=torch.float32)
    compiled = compile_and_run(eager_fn(op, out_dtype=torch.float32), *operands)
    check(op, compiled, operands, operands, torch.bfloat16, torch.float32)


@pytest.mark.parametrize("op", OPS, ids=str)
def test_the_op_reaches_the_plugin_lowering(op):
    operands = make_operands(op, 32, 48, 40, torch.bfloat16, bias_dtype=torch.float32)
    compiled = compile_and_run(eager_fn(op, out_dtype=torch.float32), *operands)
    assert compiled.lowered(op.name) == 1, compiled.counts
    if op.has_bias:
        assert compiled.lowered(op.product) == 1, compiled.counts
    # On the CPU the product runs as an fp32 GEMM on upcast operands, into an fp32 buffer.
    kernel = "extern_kernels.bmm(" if op.batched else "extern_kernels.mm("
    torch.testing.FileCheck().check("torch.float32").check(kernel).run(compiled.code)


@pytest.mark.parametrize("pair", DTYPE_PAIRS, ids=dtype_id)
@pytest.mark.parametrize("op", OPS, ids=str)
def test_out_variant_writes_into_the_out_buffer(op, pair):
    in_dtype, out_dtype = pair
    operands = make_operands(op, 13, 17, 19, in_dtype, bias_dtype=out_dtype)
    fn = eager_fn(op, out_dtype=out_dtype, use_out=True)
    if op.has_bias:
        buffer = operands[0].clone()
        compiled = compile_and_run(fn, buffer, *operands[1:])
    else:
        buffer = torch.full(op.operand_shapes(13, 17, 19)[2], float("nan"), dtype=out_dtype)
        compiled = compile_and_run(fn, *operands, buffer)
    assert compiled.result is buffer
    assert compiled.lowered(op.name) == 1, compiled.counts
    check(op, compiled, operands, operands, in_dtype, out_dtype)
