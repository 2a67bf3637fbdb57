"""Inductor lowerings for the ``.dtype`` overloads of mm, bmm, addmm, baddbmm.

Inductor registers ``tuned_addmm`` and ``tuned_baddbmm`` on the whole packet; they
take no ``out_dtype``.  ``tuned_mm`` takes it from 2.10 and ``tuned_bmm`` from 2.8,
but both allow it on CUDA/XPU only.  The lowerings here handle the ``.dtype``
overloads on every device:

* the matrix product goes to one of three named choices (below);
* ``addmm``/``baddbmm`` with an fp32 result take the fp32 product, then apply
  ``alpha * acc + beta * self`` as a pointwise epilogue that Inductor fuses;
* with ``out_dtype`` equal to the input dtype an overload *is* its default
  overload, and goes to Inductor's own lowering of that (eager does the same).

``.dtype_out`` never reaches Inductor: AOTAutograd functionalizes it into
``.dtype`` followed by ``copy_`` into the ``out=`` buffer.

Each lowering counts its choice in ``torch._dynamo.utils.counters["inductor_addmm_fix"]``
as ``<op>.dtype:<choice>``.  Upstream fix: pytorch/pytorch#190936 (open) narrows the
packet registrations.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from torch._inductor import lowering as L

from ..core.checks import check_out_dtype
from ..core.probes import FAMILY, eager_kernel_devices
from ..patching.counters import count
from ..patching.declare import Decision, needed, not_needed, require
from ..patching.probes import aten_op, is_packet_wide, takes_parameter
from ..patching.registry import Patch
from ..patching.slots import ABSENT, DictEntry
from .lowering_table import as_registered_lowering

aten = torch.ops.aten
RETIRED_BY = "pytorch/pytorch#190936 (open): Inductor stops claiming the .dtype overloads"

# Named choices for the matrix product with out_dtype.
STOCK_TEMPLATE = "stock_tuned_kernel"  # Inductor's tuned_mm / tuned_bmm with out_dtype (cuBLAS)
EAGER_KERNEL = "eager_kernel"  # the eager aten kernel as an extern call (mm on 2.8/2.9, XPU)
UPCAST_PRODUCT = "upcast_product"  # operands cast to out_dtype, then Inductor's plain mm/bmm
SAME_DTYPE = "same_dtype_as_default"  # out_dtype == input dtype: the default overload's lowering
PRODUCT_THEN_EPILOGUE = "product_then_epilogue"  # addmm/baddbmm: fp32 product + fused epilogue


def inductor_kernel_takes_out_dtype(name: str) -> bool | None:
    """Whether Inductor's ``tuned_<name>`` accepts ``out_dtype`` (mm: 2.10+, bmm: 2.8+)."""
    try:
        if name == "mm":
            from torch._inductor.kernel.mm import tuned_mm as fn
        else:
            from torch._inductor.kernel.bmm import tuned_bmm as fn
    except Exception:
        return None
    return takes_parameter(fn, "out_dtype")


def _check_operands(op: str, mat1, mat2, out_dtype) -> None:
    torch._check(
        mat1.get_dtype() == mat2.get_dtype(),
        lambda: f"{op}: operands must have the same dtype, but got "
        f"{mat1.get_dtype()} and {mat2.get_dtype()}",
    )
    check_out_dtype(mat1.get_dtype(), out_dtype)


def make_product_lowering(name: str, stock: Callable[..., Any] | None) -> Callable[..., Any]:
    """The lowering of ``aten.<name>.dtype`` (name is "mm" or "bmm").

    ``stock`` is the lowering that was registered for it (the packet-wide one)."""
    op = f"{name}.dtype"
    plain = getattr(aten, name).default
    # tuned_bmm takes out_dtype from 2.8, but on 2.8 its max-autotune path asserts
    # on it; trust Inductor's kernels only where tuned_mm takes it too (2.10+).
    stock_takes_out_dtype = stock is not None and bool(inductor_kernel_takes_out_dtype("mm"))
    eager_devices = eager_kernel_devices(name)
    eager_kernel = L.fallback_handler(getattr(aten, name).dtype, add_to_fallback_set=False)

    def product_dtype(mat1, mat2, out_dtype):
        _check_operands(op, mat1, mat2, out_dtype)
        if out_dtype == mat1.get_dtype():
            count(op, SAME_DTYPE)
            return L.lowerings[plain](mat1, mat2)
        device = mat1.get_device().type
        if device == "cuda" and stock_takes_out_dtype:
            count(op, STOCK_TEMPLATE)
            return stock(mat1, mat2, out_dtype)
        if device in eager_devices:
            count(op, EAGER_KERNEL)
            return eager_kernel(mat1, mat2, out_dtype)
        count(op, UPCAST_PRODUCT)
        return L.lowerings[plain](L.to_dtype(mat1, out_dtype), L.to_dtype(mat2, out_dtype))

    product_dtype.__name__ = f"tuned_{name}_dtype"
    product_dtype.__doc__ = (
        f"{op}: Inductor's tuned_{name} on CUDA, the eager kernel where that lacks "
        f"out_dtype, an upcast {name} on devices with no out_dtype kernel (CPU)."
    )
    return product_dtype


def _epilogue(acc, inp, out_dtype: torch.dtype, beta, alpha):
    """alpha * acc + beta * inp, computed in the product's dtype (fp32)."""
    if alpha != 1:
        acc = L.lowerings[aten.mul](acc, alpha)
    if beta != 0:  # beta == 0 ignores inp, NaN included, as eager does
        bias = L.to_dtype(inp, acc.get_dtype())
        if beta != 1:
            bias = L.lowerings[aten.mul](bias, beta)
        acc = L.lowerings[aten.add](acc, bias)
    return L.to_dtype(acc, out_dtype)


def _check_bias(op: str, inp, mat1, out_dtype) -> None:
    torch._check(
        inp.get_dtype() in (mat1.get_dtype(), out_dtype),
        lambda: f"{op}: self must have the dtype of the operands ({mat1.get_dtype()}) "
        f"or out_dtype ({out_dtype}), but got {inp.get_dtype()}",
    )


class _ProductNodeView:
    """The FX node of addmm/baddbmm seen as the node of its product (mm/bmm).

    Inductor's CPU ``tuned_bmm`` reads its operands' FX metadata from
    ``V.graph.current_node.args[0:2]``; inside baddbmm those are (self, batch1)."""

    def __init__(self, node):
        self._node = node
        self.args = tuple(node.args[1:3])

    def __getattr__(self, name):
        return getattr(self._node, name)


def _as_product_node():
    from torch._inductor.virtualized import V

    node = getattr(V.graph, "current_node", None)
    if node is None or not hasattr(V.graph, "set_current_node"):
        return contextlib.nullcontext()
    return V.graph.set_current_node(_ProductNodeView(node))


def make_accumulate_lowering(name: str, product: str) -> Callable[..., Any]:
    """The lowering of ``aten.<name>.dtype`` (addmm or baddbmm) on top of ``<product>.dtype``."""
    op = f"{name}.dtype"
    product_op = getattr(aten, product).dtype
    default_op = getattr(aten, name).default

    def accumulate_dtype(inp, mat1, mat2, out_dtype, *, beta=1, alpha=1):
        _check_operands(op, mat1, mat2, out_dtype)
        _check_bias(op, inp, mat1, out_dtype)
        if out_dtype == mat1.get_dtype():
            # Exactly the default overload; eager runs the same kernel for both
            # (bf16 results may use cuBLAS's reduced-precision reduction).
            count(op, SAME_DTYPE)
            return L.lowerings[default_op](inp, mat1, mat2, beta=beta, alpha=alpha)
        count(op, PRODUCT_THEN_EPILOGUE)
        with _as_product_node():
            acc = L.lowerings[product_op](mat1, mat2, out_dtype)
        return _epilogue(acc, inp, out_dtype, beta, alpha)

    accumulate_dtype.__name__ = f"tuned_{name}_dtype"
    accumulate_dtype.__doc__ = (
        f"{op}: {product}.dtype accumulating in fp32, then alpha * acc + beta * self as a "
        f"fused pointwise epilogue; with out_dtype equal to the input dtype, {name}.default."
    )
    return accumulate_dtype


def plan() -> list[Decision]:
    """One decision per op: a lowering of ``.dtype`` where Inductor has none of its own
    (the packet-wide entry, or nothing)."""
    lowerings = getattr(L, "lowerings", None)
    require(isinstance(lowerings, dict), "torch._inductor.lowering.lowerings dict")
    require(takes_parameter(L.register_lowering, "lowering_dict") is True, "register_lowering(lowering_dict=...)")
    for helper in ("fallback_handler", "to_dtype"):
        require(callable(getattr(L, helper, None)), f"torch._inductor.lowering.{helper}")
    decisions = []
    for name in FAMILY:
        decision = f"inductor.lowering.{name}.dtype"
        op = aten_op(f"{name}.dtype")
        current = lowerings.get(op, ABSENT)
        if current is not ABSENT and not is_packet_wide(lowerings, name):
            decisions.append(not_needed(decision, "dedicated lowering", probe=is_packet_wide, obsolete_when=RETIRED_BY))
            continue
        if name in ("mm", "bmm"):
            fn = make_product_lowering(name, current if current is not ABSENT else None)
            why = f"tuned_{name} allows out_dtype on CUDA/XPU only" + (
                " and not at all on this torch" if not inductor_kernel_takes_out_dtype(name) else ""
            )
        else:
            fn = make_accumulate_lowering(name, {"addmm": "mm", "baddbmm": "bmm"}[name])
            why = f"tuned_{name} is registered packet-wide and takes no out_dtype"
        slot = DictEntry(lowerings, op, "torch._inductor.lowering.lowerings")
        patch = Patch(decision, slot, as_registered_lowering(op, fn))
        decisions.append(needed(decision, why, [patch], probe=is_packet_wide, obsolete_when=RETIRED_BY))
    return decisions
