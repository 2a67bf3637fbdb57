"""Every out_dtype overload compiles with Inductor on the CPU, reaches the package's
lowering, has out_dtype, and matches a float64 reference; at small and odd shapes
(Inductor's pointwise rewrites of tiny matmuls keep out_dtype), with out= buffers, and
with dynamic shapes (one graph for several sizes)."""

import pytest
import torch

from cases import DTYPE_PAIRS, OPS, OPS_BY_NAME, dtype_id, eager_fn, make_operands, relative_error, tolerance
from helpers import compile_and_run

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


@pytest.mark.parametrize("op", OPS, ids=str)
def test_dynamic_shapes_compile_once_and_stay_correct(op):
    first = make_operands(op, 8, 16, 12, torch.bfloat16, bias_dtype=torch.float32)
    fn = eager_fn(op, out_dtype=torch.float32)
    compiled = compile_and_run(fn, *first, dynamic=True)
    choice = "product_then_epilogue" if op.has_bias else "upcast_product"
    assert compiled.counts[f"{op.name}.dtype:{choice}"] == 1
    assert "s0" in compiled.code or "s1" in compiled.code  # symbolic sizes in the kernel
    with torch._dynamo.config.patch(error_on_recompile=True):
        for m, k, n in [(8, 16, 12), (5, 33, 7), (17, 9, 31)]:
            operands = make_operands(op, m, k, n, torch.bfloat16, bias_dtype=torch.float32)
            out = compiled.fn(*operands)
            ref = op.reference(operands, torch.float32)
            assert out.dtype == torch.float32
            assert out.shape == ref.shape
            assert relative_error(out, ref) < 1e-5


# Shapes Inductor's CPU decompositions rewrite: M = N = 1 (dot product).  baddbmm has no
# Inductor decomposition (torch excludes it); its small shapes are covered above.
DOT_PRODUCT_REWRITES = [("mm", "decompose_mm"), ("addmm", "decompose_mm"), ("bmm", "decompose_bmm")]


@pytest.mark.parametrize("name,counter", DOT_PRODUCT_REWRITES, ids=[c[0] for c in DOT_PRODUCT_REWRITES])
def test_dot_product_rewrite_keeps_out_dtype(name, counter):
    from torch._dynamo.utils import counters

    op = OPS_BY_NAME[name]
    operands = make_operands(op, 1, 64, 1, torch.bfloat16, bias_dtype=torch.float32)
    counters["inductor"].clear()
    compiled = compile_and_run(eager_fn(op, out_dtype=torch.float32), *operands)
    assert counters["inductor"][counter] >= 1, "Inductor's small-shape rewrite did not run"
    assert compiled.result.dtype == torch.float32
    assert relative_error(compiled.result, op.reference(operands, torch.float32)) < 1e-6
    # the rewrite is pointwise code, not a GEMM call
    assert "extern_kernels.mm(" not in compiled.code and "extern_kernels.bmm(" not in compiled.code
