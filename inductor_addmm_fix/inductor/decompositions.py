"""Inductor's decomposition table, made to keep ``out_dtype`` for small shapes.

``torch._inductor.decomposition`` registers ``mm``, ``bmm`` and ``addmm``
decompositions on the whole packet, under ``@pw_cast_for_opmath``.  For the
``.dtype`` overloads they either return ``NotImplemented`` (``addmm`` then reaches
``tuned_addmm``, which takes no ``out_dtype``: "takes 3 positional arguments but
4 were given") or, for small shapes (K of 1 outer products, M = N = 1 dot
products, tiny CPU matrices), compute a pointwise result in the *input* dtype:
silently wrong.

The replacements below keep Inductor's own small-shape rewrites (they are good
for speed) but feed them operands already cast to the result's dtype, and
return ``NotImplemented`` everywhere else, so that the op reaches the lowering
(``inductor.lowerings``).  Upstream fix: pytorch/pytorch#190936 (open) narrows the
packet registration.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..core.checks import check_bias, check_bmm_operands, check_mm_operands
from ..core.decompositions import scale_and_add
from ..core.probes import FAMILY
from ..patching.declare import Decision, needed, not_needed, require
from ..patching.probes import aten_op, is_packet_wide
from ..patching.registry import Patch
from ..patching.slots import DictEntry

RETIRED_BY = "pytorch/pytorch#190936 (open): Inductor stops claiming the .dtype overloads"

Decomposition = Callable[..., Any]


def _cast(out_dtype: torch.dtype, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(out_dtype) for t in tensors)


def _keep_dtype(result: Any, out_dtype: torch.dtype) -> Any:
    if result is NotImplemented or result.dtype == out_dtype:
        return result
    return result.to(out_dtype)


def mm_dtype_small_shapes(stock_mm: Decomposition) -> Decomposition:
    """mm.dtype: Inductor's small-shape rewrite of mm, on operands cast to out_dtype."""

    def mm_dtype(self, mat2, out_dtype):
        check_mm_operands(self, mat2, out_dtype)
        return _keep_dtype(stock_mm(*_cast(out_dtype, self, mat2)), out_dtype)

    return mm_dtype


def bmm_dtype_small_shapes(stock_bmm: Decomposition) -> Decomposition:
    """bmm.dtype: Inductor's small-shape rewrite of bmm, on operands cast to out_dtype."""

    def bmm_dtype(self, mat2, out_dtype):
        check_bmm_operands(self, mat2, out_dtype)
        return _keep_dtype(stock_bmm(*_cast(out_dtype, self, mat2)), out_dtype)

    return bmm_dtype


def addmm_dtype_small_shapes(stock_mm: Decomposition) -> Decomposition:
    """addmm.dtype: the small-shape mm above plus alpha/beta; NotImplemented otherwise."""
    mm_dtype = mm_dtype_small_shapes(stock_mm)

    def addmm_dtype(self, mat1, mat2, out_dtype, beta=1, alpha=1):
        check_mm_operands(mat1, mat2, out_dtype)
        check_bias(self, (mat1.shape[0], mat2.shape[1]), mat1.dtype, out_dtype)
        product = mm_dtype(mat1, mat2, out_dtype)
        if product is NotImplemented:
            return NotImplemented
        return scale_and_add(product, self, out_dtype, beta, alpha)

    return addmm_dtype


def baddbmm_dtype_small_shapes(stock_bmm: Decomposition) -> Decomposition:
    """baddbmm.dtype: the small-shape bmm above plus alpha/beta; NotImplemented otherwise."""
    bmm_dtype = bmm_dtype_small_shapes(stock_bmm)

    def baddbmm_dtype(self, batch1, batch2, out_dtype, beta=1, alpha=1):
        check_bmm_operands(batch1, batch2, out_dtype)
        check_bias(self, (batch1.shape[0], batch1.shape[1], batch2.shape[2]), batch1.dtype, out_dtype)
        product = bmm_dtype(batch1, batch2, out_dtype)
        if product is NotImplemented:
            return NotImplemented
        return scale_and_add(product, self, out_dtype, beta, alpha)

    return baddbmm_dtype


#: op name -> (name of the op whose stock decomposition does the small shapes, factory)
SMALL_SHAPE_DECOMPOSITIONS = {
    "mm": ("mm", mm_dtype_small_shapes),
    "bmm": ("bmm", bmm_dtype_small_shapes),
    "addmm": ("mm", addmm_dtype_small_shapes),
    "baddbmm": ("bmm", baddbmm_dtype_small_shapes),
}


def plan() -> list[Decision]:
    """One decision per op: replace a packet-wide Inductor decomposition of ``.dtype``."""
    from torch._inductor import decomposition

    table = getattr(decomposition, "decompositions", None)
    require(isinstance(table, dict), "torch._inductor.decomposition.decompositions dict")
    decisions = []
    for name in FAMILY:
        decision = f"inductor.decomposition.{name}.dtype"
        op = aten_op(f"{name}.dtype")
        if not is_packet_wide(table, name):
            reason = "no Inductor decomposition" if op not in table else "dedicated entry"
            decisions.append(not_needed(decision, reason, probe=is_packet_wide, obsolete_when=RETIRED_BY))
            continue
        stock_name, factory = SMALL_SHAPE_DECOMPOSITIONS[name]
        stock = table.get(aten_op(stock_name))
        require(stock is not None, f"Inductor decomposition for {stock_name}")
        slot = DictEntry(table, op, "torch._inductor.decomposition.decompositions")
        reason = "Inductor's packet-wide decomposition drops out_dtype for small shapes"
        decisions.append(needed(decision, reason, [Patch(decision, slot, factory(stock))], probe=is_packet_wide, obsolete_when=RETIRED_BY))
    return decisions
