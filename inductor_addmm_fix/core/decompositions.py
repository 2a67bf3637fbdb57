"""Core decompositions of ``addmm.dtype`` and ``baddbmm.dtype`` that keep out_dtype.

On torch 2.8-2.12 ``torch._decomp`` registers one ``addmm`` decomposition for the whole
packet, under ``@pw_cast_for_opmath``, with the signature ``(self, mat1, mat2, beta=1,
alpha=1)``: for ``addmm.dtype`` the ``out_dtype`` argument lands in ``beta``.
``baddbmm`` has the same bug in every release up to 2.15.  Where the registered
decomposition loses out_dtype on meta tensors (``core.probes.core_decomposition_works``),
the functions below replace it for ``.dtype`` and ``.dtype_out``: what
pytorch/pytorch#179634 (torch 2.13) gave addmm.
"""

from __future__ import annotations

import torch
from torch._prims_common.wrappers import out_wrapper

from ..patching.declare import Decision, needed, not_needed, require
from ..patching.probes import aten_op
from ..patching.registry import Patch
from ..patching.slots import DictEntry
from .checks import check_bmm_operands, check_mm_operands
from .probes import FAMILY, core_decomposition_works, has_out_dtype_overloads

RETIRED_BY = {
    "addmm": "pytorch/pytorch#179634 (torch 2.13): dedicated addmm_dtype decomposition",
    "baddbmm": "none yet: baddbmm is registered packet-wide up to torch 2.15",
}


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


#: op name -> decomposition registered for both .dtype and .dtype_out
DECOMPOSITIONS = {
    "addmm": addmm_dtype,
    "baddbmm": baddbmm_dtype,
}


def plan() -> list[Decision]:
    """One decision per op: replace a core decomposition that drops out_dtype."""
    from torch._decomp import decomposition_table

    require(has_out_dtype_overloads(), "out_dtype overloads of mm/bmm/addmm/baddbmm")
    decisions = []
    for name in FAMILY:
        decision = f"core.decomposition.{name}.dtype"
        retired_by = RETIRED_BY.get(name, "pytorch/pytorch#163393 (torch 2.10): meta_mm takes out_dtype")
        works = core_decomposition_works(name)
        if works is not False:
            reason = "no core decomposition" if works is None else "stock keeps out_dtype"
            decisions.append(not_needed(decision, reason, probe=core_decomposition_works, obsolete_when=retired_by))
            continue
        require(name in DECOMPOSITIONS, f"known fix for the {name}.dtype decomposition")
        patches = [
            Patch(
                f"core.decomposition.{which}.{name}",
                DictEntry(decomposition_table, aten_op(f"{name}.{which}"), "torch._decomp.decomposition_table"),
                DECOMPOSITIONS[name],
            )
            for which in ("dtype", "dtype_out")
        ]
        reason = "the core decomposition registered for the packet drops out_dtype (it binds it to beta)"
        decisions.append(needed(decision, reason, patches, probe=core_decomposition_works, obsolete_when=retired_by))
    return decisions
