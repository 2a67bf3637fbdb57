"""The out_dtype overloads have no derivative: compiled code says so where eager does,
at ``backward()``, instead of failing the compile.

Torch defines no derivative for ``mm.dtype``, ``bmm.dtype``, ``addmm.dtype``,
``baddbmm.dtype`` and their ``.dtype_out`` overloads.  Eager's autograd kernel runs the
forward and records a ``NotImplemented`` node; ``backward()`` raises "derivative for
aten::mm is not implemented".  AOTAutograd differentiates the graph while compiling, so
that node failed the first call of a compiled function whose input requires grad
(``BackendCompilerFailed``, about 130 lines of traceback and warnings).

Where the probe finds no derivative, the kernels below take the Autograd key of these
overloads in the Python dispatcher, which Dynamo and AOTAutograd turn on while tracing
(eager mode never consults it: eager keeps torch's own kernel).  The forward runs below
autograd; its backward is ``inductor_addmm_fix::no_derivative``, an op that raises
:func:`message` when compiled code runs it.  The compile succeeds, the forward runs, and
``backward()`` raises a ``RuntimeError`` that names the op, says why, and what to do.
"""

from __future__ import annotations

from typing import Any

import torch

from ..patching.declare import Decision, per_op, require
from ..patching.ops import package_op
from ..patching.probes import aten_op
from ..patching.registry import Patch
from ..patching.slots import PyKernel
from .probes import FAMILY, has_no_derivative, has_out_dtype_overloads

RETIRED_BY = "none yet: torch defines no derivative for the out_dtype overloads"
_SCHEMA = "no_derivative(Tensor grad, SymInt[] size, ScalarType dtype, str op) -> Tensor"

#: op -> how to differentiate the same product
CASTS = {
    "mm": "torch.mm(a, b).float() or torch.mm(a.float(), b.float())",
    "bmm": "torch.bmm(a, b).float() or torch.bmm(a.float(), b.float())",
    "addmm": "torch.addmm(c, a, b).float() or torch.addmm(c, a.float(), b.float())",
    "baddbmm": "torch.baddbmm(c, a, b).float() or torch.baddbmm(c, a.float(), b.float())",
}


def message(qualname: str) -> str:
    """The error of ``backward()`` through ``aten.<qualname>`` (``"mm.dtype"``)."""
    name = qualname.split(".")[0]
    return (
        f"derivative for aten::{qualname} is not implemented: torch defines no derivative for the "
        f"out_dtype= overloads of mm, bmm, addmm and baddbmm (eager mode raises this at backward too). "
        f"To train through this product, compute it without out_dtype and cast ({CASTS[name]}), "
        f"or call it inside a torch.autograd.Function with its own backward, as Liger-Kernel does."
    )


def _no_derivative(grad, size, dtype, op):
    raise RuntimeError(message(op))


def _no_derivative_fake(grad, size, dtype, op):
    return grad.new_empty(size, dtype=dtype)


def no_derivative_op() -> torch._ops.OpOverload:
    """``torch.ops.inductor_addmm_fix.no_derivative.default``: the gradient of an input
    of ``op`` (its size and dtype while tracing); raises :func:`message` when run."""
    return package_op("no_derivative", _SCHEMA, {"CompositeExplicitAutograd": _no_derivative}, fake=_no_derivative_fake)


class _NoDerivative(torch.autograd.Function):
    """The forward of one call, below autograd; a backward that raises when it runs."""

    @staticmethod
    def forward(ctx, call, qualname, out, *tensors):
        first = next(i for i, t in enumerate(tensors) if t.requires_grad)
        ctx.first, ctx.count, ctx.qualname = first, len(tensors), qualname
        ctx.size, ctx.dtype = list(tensors[first].shape), tensors[first].dtype
        if out is not None:
            ctx.mark_dirty(out)
        with torch._C._AutoDispatchBelowAutograd():
            return call(*tensors)

    @staticmethod
    def backward(ctx, grad):
        # One gradient is enough: the op raises before any gradient is used.
        grads = [None] * ctx.count
        grads[ctx.first] = no_derivative_op()(grad, ctx.size, ctx.dtype, ctx.qualname)
        return (None, None, None, *grads)


def autograd_kernel(op: Any, qualname: str):
    """The Autograd kernel of ``op`` (``aten.mm.dtype``) under the Python dispatcher."""

    def kernel(*args, **kwargs):
        count = next((i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)), len(args))
        tensors, rest = args[:count], args[count:]
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):

            def call(*operands):
                return op(*operands, *rest, **kwargs)

            return _NoDerivative.apply(call, qualname, kwargs.get("out"), *tensors)
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args, **kwargs)

    kernel.__name__ = kernel.__qualname__ = f"{qualname.replace('.', '_')}_autograd"
    return kernel


def _patch(qualname: str) -> Patch:
    no_derivative_op()  # compiled backward graphs (from a cache too) call it
    op = aten_op(qualname)
    return Patch(f"core.autograd_kernel.{qualname}", PyKernel(op, torch._C.DispatchKey.Autograd), autograd_kernel(op, qualname))


def plan() -> list[Decision]:
    """One decision per op: its overloads without a derivative get the kernel above."""
    require(has_out_dtype_overloads(), "out_dtype overloads of mm/bmm/addmm/baddbmm")
    reasons = (
        "torch defines no derivative, so AOTAutograd fails the compile when an input requires grad; "
        "compiled code raises at backward instead, as eager does",
        "torch defines a derivative: AOTAutograd differentiates it as eager does",
    )
    return per_op("core.no_derivative", FAMILY, ("dtype", "dtype_out"), has_no_derivative, _patch,
                  reasons=reasons, probe=has_no_derivative, obsolete_when=RETIRED_BY)
