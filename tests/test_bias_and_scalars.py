"""addmm/baddbmm: the bias broadcasts, may be of the input dtype, and beta/alpha
scale like eager's; beta=0 ignores the bias entirely, NaN included."""

import pytest
import torch

from cases import OPS_BY_NAME, eager_fn, make_operands, relative_error
from helpers import compile_and_run

BIASED = [OPS_BY_NAME["addmm"], OPS_BY_NAME["baddbmm"]]
M, K, N = 11, 24, 13


def bias_shapes(op):
    full = op.operand_shapes(M, K, N)[2]
    shapes = {"full": full, "row (1-D)": (N,), "1xN": (1, N), "Mx1": (M, 1), "scalar-like 1x1": (1, 1)}
    if op.batched:
        shapes["1xMxN"] = (1, M, N)
    return shapes


def run(op, operands, **scalars):
    compiled = compile_and_run(eager_fn(op, out_dtype=torch.float32, **scalars), *operands)
    assert compiled.lowered(op.name) == 1, compiled.counts
    return compiled.result


@pytest.mark.parametrize("op", BIASED, ids=str)
def test_bias_broadcasts_to_the_result(op):
    for label, shape in bias_shapes(op).items():
        torch._dynamo.reset()
        operands = make_operands(op, M, K, N, torch.bfloat16, bias_dtype=torch.float32, bias_shape=shape)
        out = run(op, operands)
        ref = op.reference(operands, torch.float32)
        assert out.shape == ref.shape, label
        assert relative_error(out, ref) < 1e-5, label


@pytest.mark.parametrize("bias_dtype", [torch.bfloat16, torch.float32], ids=["bf16 bias", "fp32 bias"])
@pytest.mark.parametrize("op", BIASED, ids=str)
def test_bias_may_have_the_input_dtype(op, bias_dtype):
    operands = make_operands(op, M, K, N, torch.bfloat16, bias_dtype=bias_dtype)
    out = run(op, operands)
    assert out.dtype == torch.float32
    assert relative_error(out, op.reference(operands, torch.float32)) < 1e-5


@pytest.mark.parametrize(
    "beta,alpha", [(1, 1), (0.5, 2.0), (-1.25, 0.75), (0, 1), (0, 3.5), (2, 0), (1, -1)]
)
@pytest.mark.parametrize("op", BIASED, ids=str)
def test_beta_and_alpha_scale_like_eager(op, beta, alpha):
    operands = make_operands(op, M, K, N, torch.bfloat16, bias_dtype=torch.float32)
    out = run(op, operands, beta=beta, alpha=alpha)
    ref = op.reference(operands, torch.float32, beta=beta, alpha=alpha)
    if alpha == 0:
        torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)
    else:
        assert relative_error(out, ref) < 1e-5


@pytest.mark.parametrize("poison", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("op", BIASED, ids=str)
def test_beta_zero_ignores_the_bias_even_nan_and_inf(op, poison):
    operands = make_operands(op, M, K, N, torch.bfloat16, bias_dtype=torch.float32)
    operands = (torch.full_like(operands[0], poison), *operands[1:])
    out = run(op, operands, beta=0)
    assert torch.isfinite(out).all()
    assert relative_error(out, op.reference(operands, torch.float32, beta=0)) < 1e-5
