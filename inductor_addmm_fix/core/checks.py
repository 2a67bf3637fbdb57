"""Preconditions of the out_dtype matmuls, shared by the meta kernels, the core
decompositions and Inductor's decompositions: what eager (CUDA) checks, with its
wording, as ``torch._check`` calls that work on real, fake and meta tensors."""

from __future__ import annotations

import torch

_LOW_PRECISION = (torch.float16, torch.bfloat16)

#: Devices whose matmuls with out_dtype follow eager's rule (same dtype, or fp32
#: for fp16/bf16): CUDA and XPU in eager, the CPU through this package's lowering;
#: meta tensors stand for any of them.  Torch 2.14 stopped checking the rule for
#: other (out-of-tree) devices, whose kernels may allow more; so do we.
OUT_DTYPE_RULE_DEVICES = ("cpu", "cuda", "xpu", "meta")


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


# The checks of each overload's meta kernel, alone (``core.meta_kernels`` runs them
# before FakeTensor runs the meta kernel).
def check_mm_dtype(self, mat2, out_dtype) -> None:
    check_mm_operands(self, mat2, out_dtype)


def check_bmm_dtype(self, mat2, out_dtype) -> None:
    check_bmm_operands(self, mat2, out_dtype)


def check_addmm_dtype(self, mat1, mat2, out_dtype, *, beta=1, alpha=1) -> None:
    check_mm_operands(mat1, mat2, out_dtype)
    check_bias(self, (mat1.shape[0], mat2.shape[1]), mat1.dtype, out_dtype)


def check_baddbmm_dtype(self, batch1, batch2, out_dtype, *, beta=1, alpha=1) -> None:
    check_bmm_operands(batch1, batch2, out_dtype)
    check_bias(self, (batch1.shape[0], batch1.shape[1], batch2.shape[2]), batch1.dtype, out_dtype)
