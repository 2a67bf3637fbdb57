"""Invalid input to the out_dtype matmuls, as data: what is wrong, how to build it,
and a pattern that an error message naming the problem matches.  Shared by the
CPU error tests (tests/test_error_parity.py) and the CUDA eager-vs-compiled
comparison (tests/gpu/test_error_parity_cuda.py)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from cases import OPS, Op

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32

#: How a message may spell a dtype: Python's torch.bfloat16 or C++'s BFloat16.
#: eager's and meta_mm's wording, or the older bmm meta's
OUT_DTYPE_RULE = r"out_dtype (must be the same as input dtype or fp32|only supported for .*float32 output)"

SPELLING = {BF16: "b(float16|Float16)", FP16: "(float16|Half)", FP32: "(float32|Float)"}


@dataclasses.dataclass(frozen=True)
class Invalid:
    op: Op
    problem: str  # what is wrong, e.g. "operands of different dtypes"
    shape: str  # "matrix" (4x5 @ 5x3) or "dot" (1x5 @ 5x1, which Inductor rewrites as pointwise code)
    build: Callable[[str], tuple[Callable, tuple]]  # device -> (function to compile, its arguments)
    message: str  # regex that the error message matches
    out_dtype: torch.dtype  # the out_dtype asked for

    @property
    def id(self) -> str:
        return f"{self.op.name}-{self.problem}-{self.shape}"


def _randn(shape, dtype, device):
    return torch.randn(shape, device=device).to(dtype)


def _case(op: Op, problem: str, shape: str, message: str, *, a=BF16, b=BF16, out_dtype=FP32,
          a_shape=None, b_shape=None, bias=None, bias_shape=None, out=None, out_shape=None) -> Invalid:
    m, k, n = (4, 5, 3) if shape == "matrix" else (1, 5, 1)
    a_default, b_default, c_default = op.operand_shapes(m, k, n, batch=2)

    def build(device):
        operands = [_randn(a_shape or a_default, a, device), _randn(b_shape or b_default, b, device)]
        if op.has_bias:
            operands.insert(0, _randn(bias_shape or c_default, bias or out_dtype, device))
        if out is not None:
            buffer = torch.zeros(out_shape or c_default, dtype=out, device=device)

            def fn(*args):
                op.call(args[:-1], out_dtype, out=args[-1])
                return args[-1]

            return fn, (*operands, buffer)
        return (lambda *args: op.call(args, out_dtype)), tuple(operands)

    return Invalid(op, problem, shape, build, message, out_dtype)


def invalid_cases() -> list[Invalid]:
    cases = []
    for op in OPS:
        lead = (2,) if op.batched else ()
        for shape in ("matrix", "dot"):
            cases += [
                _case(op, "operands of different dtypes", shape,
                      rf"(?s)(dtype|scalar type).*{SPELLING[BF16]}.*{SPELLING[FP16]}",
                      b=FP16),
                _case(op, "fp32 operands asking for bf16", shape,
                      OUT_DTYPE_RULE, a=FP32, b=FP32, out_dtype=BF16),
                _case(op, "fp16 operands asking for bf16", shape,
                      OUT_DTYPE_RULE, a=FP16, b=FP16, out_dtype=BF16),
                _case(op, "out= of the wrong dtype", shape,
                      rf"[Ee]xpected out tensor to have dtype \S*{SPELLING[FP32]}.*{SPELLING[BF16]}", out=BF16),
            ]
            if op.has_bias:
                cases.append(_case(op, "bias of a third dtype", shape,
                                   rf"self must have the dtype.*{SPELLING[FP16]}", bias=FP16))
        cases += [
            _case(op, "inner dimensions differ", "matrix",
                  r"cannot be multiplied|same reduction dim|Expected size|size mismatch",
                  a_shape=(*lead, 4, 5), b_shape=(*lead, 6, 3)),
            _case(op, "operand of the wrong rank", "matrix",
                  r"must be a matrix|must be a 3D tensor|must be 2D|must be 3D|[Ee]xpected 2-D|[Ee]xpected 3-D",
                  a_shape=(2, *lead, 4, 5) if not op.batched else (4, 5)),
            _case(op, "out= of the wrong shape", "matrix",
                  # Dynamo's words: 2.10+ and 2.8/2.9
                  r"[Ss]hape mismatch.*out=|out variants with resizing", out=FP32, out_shape=(*lead, 4, 4)),
        ]
        if op.batched:
            cases.append(_case(op, "batch sizes differ", "matrix", r"Expected size|batch",
                               a_shape=(2, 4, 5), b_shape=(3, 5, 3)))
        if op.has_bias:
            cases += [
                _case(op, "bias that does not broadcast", "matrix", r"broadcast|must match the size",
                      bias_shape=(*lead, 4, 4)),
                _case(op, "bias of higher rank than the result", "matrix", r"broadcast",
                      bias_shape=(3, *lead, 4, 3)),
            ]
    return cases


INVALID = invalid_cases()
