"""Tier 1: dtype-aware core decompositions and meta kernels.

On torch 2.8-2.12 ``torch._decomp`` registers one ``addmm`` decomposition for the
whole packet, under ``@pw_cast_for_opmath``, with the signature
``(self, mat1, mat2, beta=1, alpha=1)``: for ``addmm.dtype`` the ``out_dtype``
argument lands in ``beta`` and FakeTensor dies on ``torch.dtype * FakeTensor``.
``baddbmm`` has the same bug in every release up to 2.15, and on 2.8/2.9
``meta_mm`` takes no ``out_dtype``.  That kernel is also what the dispatcher's
Meta key runs, so Dynamo fails at trace time for every backend.

This module holds the correct functions; ``_plan`` decides where they go.
"""

from __future__ import annotations

import torch
from torch._prims_common.wrappers import out_wrapper

_LOW_PRECISION = (torch.float16, torch.bfloat16)

#: Devices whose matmuls with out_dtype follow eager's rule (same dtype, or fp32
#: for fp16/bf16): CUDA and XPU in eager, the CPU through this package's lowering;
#: meta tensors stand for any of them.  Torch 2.14 stopped checking the rule for
#: other (out-of-tree) devices, whose kernels may allow more; so do we.
OUT_DTYPE_RULE_DEVICES = ("cpu", "cuda", "xpu", "meta")


# ---------------------------------------------------------------- preconditions
def check_out_dtype(input_dtype: torch.dtype, out_dtype: torch.dtype, device=None) -> None:
    if device is not None and torch.device(device).type not in OUT_DTYPE_RULE_DEVICES:
        return
    torch._check(
        out_dtype == input_dtype
        or (out_dtype == torch.float32 and input_dtype in _LOW_PRECISION),
        lambda: "out_dtype must be the same as input dtype or fp32 for fp16/bf16 inputs, "
        f"got out_dtype={out_dtype} for {input_dtype} inputs",
    )


def check_mm_operands(mat1: torch.Tensor, mat2: torch.Tensor, out_dtype: torch.dtype) -> None:
    torch._check(mat1.dim() == 2, lambda: f"mat1 must be a matrix, got {mat1.dim()}-D tensor")
    torch._check(mat2.dim() == 2, lambda: f"mat2 must be a matrix, got {mat2.dim()}-D tensor")
    torch._check(
        mat1.shape[1] == mat2.shape[0],
        lambda: f"mat1 and mat2 shapes cannot be multiplied "
        f"({mat1.shape[0]}x{mat1.shape[1]} and {mat2.shape[0]}x{mat2.shape[1]})",
    )
    torch._check(
        mat1.dtype == mat2.dtype,
        lambda: f"mat1 and mat2 must have the same dtype, but got {mat1.dtype} and {mat2.dtype}",
    )
    check_out_dtype(mat1.dtype, out_dtype, mat1.device)


def check_bmm_operands(b1: torch.Tensor, b2: torch.Tensor, out_dtype: torch.dtype) -> None:
    torch._check(b1.dim() == 3, lambda: f"batch1 must be a 3D tensor, got {b1.dim()}-D")
    torch._check(b2.dim() == 3, lambda: f"batch2 must be a 3D tensor, got {b2.dim()}-D")
    torch._check(
        b1.shape[0] == b2.shape[0] and b1.shape[2] == b2.shape[1],
        lambda: f"Expected size for first two dimensions of batch2 tensor to be: "
        f"[{b1.shape[0]}, {b1.shape[2]}] but got: [{b2.shape[0]}, {b2.shape[1]}].",
    )
    torch._check(
        b1.dtype == b2.dtype,
        lambda: f"batch1 and batch2 must have the same dtype, but got {b1.dtype} and {b2.dtype}",
    )
    check_out_dtype(b1.dtype, out_dtype, b1.device)


def check_bias(self: torch.Tensor, shape: tuple, input_dtype, out_dtype) -> None:
    """``self`` (the bias) must broadcast to the result and be of the input or output dtype."""
    torch._check(
        self.dtype in (input_dtype, out_dtype),
        lambda: f"self must have the dtype of the inputs ({input_dtype}) or out_dtype "
        f"({out_dtype}), but got {self.dtype}",
    )
    torch._check(
        self.dim() <= len(shape),
        lambda: f"self of shape {tuple(self.shape)} cannot be broadcast to {tuple(shape)}",
    )
    for have, want in zip(reversed(self.shape), reversed(shape)):
        torch._check(
            have == 1 or have == want,
            lambda: f"self of shape {tuple(self.shape)} cannot be broadcast to {tuple(shape)}",
        )


# ---------------------------------------------------------------- meta kernels
# Shapes and dtypes only; FakeTensor runs these during Dynamo tracing.


def meta_mm_dtype(self, mat2, out_dtype):
    """mm.dtype: [M, K] @ [K, N] -> [M, N] of out_dtype."""
    check_mm_operands(self, mat2, out_dtype)
    return self.new_empty((self.shape[0], mat2.shape[1]), dtype=out_dtype)


def meta_bmm_dtype(self, mat2, out_dtype):
    """bmm.dtype: [B, M, K] @ [B, K, N] -> [B, M, N] of out_dtype."""
    check_bmm_operands(self, mat2, out_dtype)
    return self.new_empty((self.shape[0], self.shape[1], mat2.shape[2]), dtype=out_dtype)


def meta_addmm_dtype(self, mat1, mat2, out_dtype, *, beta=1, alpha=1):
    """addmm.dtype: like mm.dtype; ``self`` broadcasts to [M, N]."""
    check_mm_operands(mat1, mat2, out_dtype)
    shape = (mat1.shape[0], mat2.shape[1])
    check_bias(self, shape, mat1.dtype, out_dtype)
    return mat1.new_empty(shape, dtype=out_dtype)


def meta_baddbmm_dtype(self, batch1, batch2, out_dtype, *, beta=1, alpha=1):
    """baddbmm.dtype: [B, M, K] @ [B, K, N] -> [B, M, N]; ``self`` broadcasts to it."""
    check_bmm_operands(batch1, batch2, out_dtype)
    shape = (batch1.shape[0], batch1.shape[1], batch2.shape[2])
    check_bias(self, shape, batch1.dtype, out_dtype)
    return batch1.new_empty(shape, dtype=out_dtype)


meta_mm_dtype_out = out_wrapper(exact_dtype=True)(meta_mm_dtype)
meta_bmm_dtype_out = out_wrapper(exact_dtype=True)(meta_bmm_dtype)
meta_addmm_dtype_out = out_wrapper(exact_dtype=True)(meta_addmm_dtype)
meta_baddbmm_dtype_out = out_wrapper(exact_dtype=True)(meta_baddbmm_dtype)


# ---------------------------------------------------------------- decompositions
# What PR #179634 (torch 2.13) gave addmm; baddbmm has no upstream fix yet.


def scale_and_add(product, self, out_dtype, beta, alpha):
    """alpha * product + beta * self.to(out_dtype); beta == 0 ignores self."""
    if alpha != 1:
        product = alpha * product
    if beta == 0:  # eager ignores self entirely, NaN and inf included
        return product
    bias = self.to(out_dtype)
    if beta != 1:
        bias = beta * bias
    return product + bias  # product first: the result is contiguous, like eager


@out_wrapper(exact_dtype=True)
def addmm_dtype(self, mat1, mat2, out_dtype, beta=1, alpha=1):
    """addmm.dtype = alpha * mm(mat1, mat2, out_dtype) + beta * self.to(out_dtype)."""
    check_mm_operands(mat1, mat2, out_dtype)
    product = torch.mm(mat1, mat2, out_dtype=out_dtype)
    return scale_and_add(product, self, out_dtype, beta, alpha)


@out_wrapper(exact_dtype=True)
def baddbmm_dtype(self, batch1, batch2, out_dtype, beta=1, alpha=1):
    """baddbmm.dtype = alpha * bmm(batch1, batch2, out_dtype) + beta * self.to(out_dtype)."""
    check_bmm_operands(batch1, batch2, out_dtype)
    product = torch.bmm(batch1, batch2, out_dtype=out_dtype)
    return scale_and_add(product, self, out_dtype, beta, alpha)


#: op name -> (meta for .dtype, meta for .dtype_out)
META_KERNELS = {
    "mm": (meta_mm_dtype, meta_mm_dtype_out),
    "bmm": (meta_bmm_dtype, meta_bmm_dtype_out),
    "addmm": (meta_addmm_dtype, meta_addmm_dtype_out),
    "baddbmm": (meta_baddbmm_dtype, meta_baddbmm_dtype_out),
}

#: op name -> decomposition registered for both .dtype and .dtype_out
DECOMPOSITIONS = {
    "addmm": addmm_dtype,
    "baddbmm": baddbmm_dtype,
}
