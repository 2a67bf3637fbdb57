"""Transposed, sliced (storage offset) and strided operands and biases give the
same result as contiguous ones."""

import pytest
import torch

from cases import OPS, eager_fn, relative_error
from helpers import compile_and_run

M, K, N = 12, 20, 9


def layouts(op, dtype=torch.bfloat16):
    """name -> function producing (a, b) of logical shapes [.., M, K] and [.., K, N]."""
    lead = (3,) if op.batched else ()

    def randn(*shape):
        return torch.randn(*shape, dtype=dtype)

    def contiguous():
        return randn(*lead, M, K), randn(*lead, K, N)

    def transposed():
        return randn(*lead, K, M).transpose(-1, -2), randn(*lead, N, K).transpose(-1, -2)

    def sliced():  # non-zero storage offsets and row strides larger than the width
        a = randn(*lead, M + 3, K + 5)[..., 2 : 2 + M, 3 : 3 + K]
        b = randn(*lead, K + 1, N + 4)[..., 1:, 4:]
        return a, b

    def every_other_row():
        return randn(*lead, 2 * M, K)[..., ::2, :], randn(*lead, K, 2 * N)[..., ::2]

    return {"contiguous": contiguous, "transposed": transposed, "sliced": sliced, "strided": every_other_row}


@pytest.mark.parametrize("layout", ["transposed", "sliced", "strided"])
@pytest.mark.parametrize("op", OPS, ids=str)
def test_non_contiguous_operands(op, layout):
    a, b = layouts(op)[layout]()
    assert not (a.is_contiguous() and b.is_contiguous())
    operands = (a, b)
    if op.has_bias:
        lead = (3,) if op.batched else ()
        bias = torch.randn(*lead, N + 2, M).transpose(-1, -2)[..., 1 : 1 + N]  # strided, offset
        operands = (bias, a, b)
    compiled = compile_and_run(eager_fn(op, out_dtype=torch.float32), *operands)
    assert compiled.lowered(op.name) == 1, compiled.counts
    out = compiled.result
    assert out.dtype == torch.float32
    assert relative_error(out, op.reference(operands, torch.float32)) < 1e-5


@pytest.mark.parametrize("op", OPS, ids=str)
def test_result_is_contiguous_like_eager(op):
    a, b = layouts(op)["transposed"]()
    operands = (torch.randn(op.operand_shapes(M, K, N)[2]), a, b) if op.has_bias else (a, b)
    out = compile_and_run(eager_fn(op, out_dtype=torch.float32), *operands).result
    assert out.is_contiguous()
