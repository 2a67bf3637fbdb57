"""Eager mode has no CPU kernel for the out_dtype overloads: the package's kernel says
so, and why the call ran eagerly.

Torch implements ``mm``/``bmm``/``addmm``/``baddbmm`` with ``out_dtype=`` for CUDA (and
XPU) only.  Compiled with Inductor they run on the CPU (the package lowers them), but a
call that runs in eager mode meets the dispatcher's "Could not run 'aten::mm.dtype_out'
with arguments from the 'CPU' backend", which names no cause.  Under ``torch.compile``
those are the calls Dynamo leaves to eager: an ``out=`` it does not trace (not
contiguous, as a transposed or sliced view is; of another shape, an empty tensor
included, which ``out=`` would resize), a graph break, a frame past the recompile limit,
a backend that runs graphs eagerly.

Where the CPU has no kernel (the probe runs one), the kernels below take the CPU key of
the eight overloads.  They raise ``NotImplementedError``, the dispatcher's exception
type, naming the op, the cause they can see in their arguments (the ``out=`` tensor),
and what to do.  Other devices keep their kernels: CUDA's run as before.
"""

from __future__ import annotations

import torch

from ..patching.declare import Decision, per_op, require
from ..patching.probes import aten_op
from ..patching.registry import Patch
from ..patching.slots import DispatcherKernel
from .probes import FAMILY, eager_cpu_has_kernel, has_out_dtype_overloads

RETIRED_BY = "none yet: torch implements the out_dtype matmuls for CUDA and XPU only"
FULLGRAPH_HINT = "torch.compile(..., fullgraph=True) raises where Dynamo would leave a call to eager"


def result_shape(name: str, tensors) -> list[int] | None:
    """The shape of the result of ``aten.<name>``'s operands; None if they do not multiply."""
    a, b = tensors[-2:]
    if name in ("mm", "addmm") and a.dim() == 2 and b.dim() == 2:
        return [a.shape[0], b.shape[1]]
    if name in ("bmm", "baddbmm") and a.dim() == 3 and b.dim() == 3:
        return [a.shape[0], a.shape[1], b.shape[2]]
    return None


def message(qualname: str, tensors=(), out=None) -> str:
    """Why ``aten.<qualname>`` (``"mm.dtype_out"``) ran in eager mode on the CPU, as far as
    its arguments tell."""
    name = qualname.split(".")[0]
    first = (
        f"eager mode has no CPU kernel for aten::{qualname} (torch implements out_dtype= matmuls "
        f"on GPUs only); compiled with Inductor, inductor_addmm_fix runs it on the CPU."
    )
    shape = result_shape(name, tensors) if len(tensors) >= 2 else None
    if out is not None and shape is not None:
        if list(out.shape) != shape:
            return (
                f"{first} This call ran eagerly because torch.compile does not trace an out= it "
                f"would resize: out= has shape {list(out.shape)}, the result {shape}. Pass an out= "
                f"of shape {shape}, or none and use the result."
            )
        if not out.is_contiguous():
            return (
                f"{first} This call ran eagerly because torch.compile does not trace an out= that "
                f"is not contiguous: out= has strides {tuple(out.stride())} (a transposed or sliced "
                f"view). Pass a contiguous out=, or none and copy the result into the view."
            )
    return (
        f"{first} This call ran eagerly: outside torch.compile, or under it after a graph break, "
        f"in a frame Dynamo skipped (past the recompile limit, for one), or with a backend that "
        f"runs graphs eagerly (\"eager\", \"aot_eager\"); {FULLGRAPH_HINT}."
    )


def cpu_kernel(qualname: str):
    """The CPU kernel of ``aten.<qualname>``: raises :func:`message`."""

    def kernel(*args, **kwargs):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        raise NotImplementedError(message(qualname, tensors, kwargs.get("out")))

    kernel.__name__ = kernel.__qualname__ = f"{qualname.replace('.', '_')}_cpu"
    return kernel


def plan() -> list[Decision]:
    """One decision per op: its overloads that the CPU cannot run get the kernel above."""
    require(has_out_dtype_overloads(), "out_dtype overloads of mm/bmm/addmm/baddbmm")
    reasons = (
        "eager mode has no CPU kernel, and the dispatcher's error names no cause; the kernel "
        "raises one that says why the call ran eagerly (an out= Dynamo does not trace, ...)",
        "eager mode runs it on the CPU",
    )
    return per_op(
        "core.eager_cpu", FAMILY, ("dtype", "dtype_out"), lambda qualname: not eager_cpu_has_kernel(qualname),
        lambda qualname: Patch(f"core.cpu_kernel.{qualname}", DispatcherKernel(qualname, "CPU"), cpu_kernel(qualname)),
        reasons=reasons, probe=eager_cpu_has_kernel, obsolete_when=RETIRED_BY,
    )
