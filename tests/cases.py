"""The four ops with out_dtype, as data: how to build operands, call them, and
compute a float64 reference.  Shared by the CPU suite and the GPU suite."""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

LOW = (torch.float16, torch.bfloat16)

#: (input dtype, out_dtype) pairs that eager CUDA accepts.
DTYPE_PAIRS = [
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float32),
    (torch.bfloat16, torch.bfloat16),
    (torch.float32, torch.float32),
]


def dtype_id(pair) -> str:
    i, o = pair
    short = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    return f"{short[i]}->{short[o]}"


@dataclasses.dataclass(frozen=True)
class Op:
    name: str  # mm, bmm, addmm, baddbmm
    batched: bool
    has_bias: bool

    @property
    def product(self) -> str:
        return "bmm" if self.batched else "mm"

    def __str__(self) -> str:
        return self.name

    def operand_shapes(self, m: int, k: int, n: int, batch: int = 3):
        lead = (batch,) if self.batched else ()
        return (*lead, m, k), (*lead, k, n), (*lead, m, n)

    def call(self, operands, out_dtype, *, beta=1, alpha=1, out=None):
        fn = getattr(torch, self.name)
        kwargs = {"out_dtype": out_dtype}
        if self.has_bias:
            kwargs.update(beta=beta, alpha=alpha)
        if out is not None:
            kwargs["out"] = out
        return fn(*operands, **kwargs)

    def reference(self, operands, out_dtype, *, beta=1, alpha=1) -> torch.Tensor:
        """float64 result, then rounded to out_dtype like an fp32-accumulating kernel."""
        d = [t.double() for t in operands]
        if self.has_bias:
            bias, a, b = d
            product = a @ b
            result = alpha * product if beta == 0 else alpha * product + beta * bias
        else:
            a, b = d
            result = a @ b
        return result.to(out_dtype).double() if out_dtype in LOW else result


OPS = [
    Op("mm", batched=False, has_bias=False),
    Op("bmm", batched=True, has_bias=False),
    Op("addmm", batched=False, has_bias=True),
    Op("baddbmm", batched=True, has_bias=True),
]
OPS_BY_NAME = {op.name: op for op in OPS}


def make_operands(op: Op, m, k, n, in_dtype, bias_dtype=None, device="cpu", bias_shape=None):
    a_shape, b_shape, c_shape = op.operand_shapes(m, k, n)
    a = torch.randn(a_shape, device=device).to(in_dtype)
    b = torch.randn(b_shape, device=device).to(in_dtype)
    if not op.has_bias:
        return (a, b)
    c = torch.randn(bias_shape or c_shape, device=device).to(bias_dtype or in_dtype)
    return (c, a, b)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.double()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def tolerance(in_dtype, out_dtype) -> float:
    """Relative error allowed against float64 (METHOD.md): fp32 accumulation of
    exactly representable products lands far below 1e-5; a bf16/fp16 result is
    rounded once, so it is within a unit of its last place."""
    if out_dtype == torch.bfloat16:
        return 8e-3
    if out_dtype == torch.float16:
        return 1e-3
    return 1e-5


def eager_fn(op: Op, *, out_dtype, beta=1, alpha=1, use_out=False) -> Callable:
    """A function to compile: the op with out_dtype, optionally writing into out=."""
    if use_out and op.has_bias:
        # FLCE's pattern: accumulate into the bias buffer itself.
        def fn(c, a, b):
            op.call((c, a, b), out_dtype, beta=beta, alpha=alpha, out=c)
            return c

    elif use_out:

        def fn(a, b, out):
            op.call((a, b), out_dtype, out=out)
            return out

    else:

        def fn(*operands):
            return op.call(operands, out_dtype, beta=beta, alpha=alpha)

    return fn
