"""In-place accumulates on a Hopper GPU run the package's accumulate kernel where it is faster.

The ``reinplace`` feature lowers an accumulation chain's steps (Liger FLCE's
``addmm(grad_weight, g.t(), x, out=grad_weight)``, one per chunk) to cuBLAS in place:
``addmm.dtype_out`` for an fp32 accumulator, ``addmm.out`` for one of the operands'
dtype.  cuBLAS adds C after the product, one after the other; for the few rows a chunk
has, that pass over C is a third of the step's time.  :mod:`.hopper_accumulate` overlaps
it with the product.

This module wraps the lowerings of the two in-place ops (``inductor_addmm_fix::addmm_dtype_``
and ``aten.addmm_``) that ``reinplace`` registers: a step on a GPU of capability 9.0 with
bf16/fp16 operands and ``beta = alpha = 1`` becomes a call of
``inductor_addmm_fix::accumulate_`` (where its sizes are known, only if the kernel takes
them), which at run time takes the kernel where
:func:`.hopper_accumulate.supports` says so (layouts, alignment, sizes where it measured
faster) and cuBLAS otherwise, the call ``reinplace`` would have made (also for the rest
of the process once the kernel failed to build or launch, with one warning).  Every other
step is left to the wrapped lowering.  Counted as ``addmm.dtype:hopper_accumulate`` /
``addmm:hopper_accumulate`` in ``counters["inductor_addmm_fix"]``; the calls the kernel ran
in ``hopper_accumulate.runs``.

Upstream: none (a kernel of this package; cuBLAS has no overlapped ``beta = 1``).
"""

from __future__ import annotations

from typing import Any

import torch

from ..patching.counters import count
from ..patching.declare import Decision, Unavailable, needed, require
from ..patching.ops import package_op
from ..patching.probes import takes_parameter
from ..patching.registry import ABSENT, DictEntry, Patch
from . import hopper_accumulate
from .hopper_accumulate import dtypes_supported, on_hopper, sizes_supported
from .reinplace import addmm_dtype_eager, addmm_dtype_inplace, lower_addmm_, lower_addmm_dtype_

aten = torch.ops.aten
NAME = "hopper_accumulate"  # counted as "<op>:hopper_accumulate"
RETIRED_BY = "none: a kernel of this package (cuBLAS runs beta = 1 after the product)"
_SCHEMA = "accumulate_(Tensor(a!) self, Tensor mat1, Tensor mat2) -> ()"


def _accumulate_(self, mat1, mat2):
    """self += mat1 @ mat2 in place: the kernel where it applies, else what ``reinplace``
    runs (cuBLAS on CUDA; in ``self``'s dtype, the fp32 product of reduced-precision
    operands included)."""
    if hopper_accumulate.accumulate_if_supported(self, mat1, mat2):
        return
    if self.dtype == mat1.dtype:
        torch.addmm(self, mat1, mat2, out=self)
    else:
        addmm_dtype_eager(self, mat1, mat2, self.dtype)


def _accumulate_fake(self, mat1, mat2):
    return None


def accumulate_op() -> torch._ops.OpOverload:
    """``torch.ops.inductor_addmm_fix.accumulate_.default``, defined on first use."""
    return package_op("accumulate_", _SCHEMA, {"CompositeExplicitAutograd": _accumulate_, "Meta": _accumulate_fake})


def routes_here(self, mat1, mat2, beta: Any = 1, alpha: Any = 1) -> bool:
    """Whether a step lowers to ``accumulate_`` (IR nodes): on a Hopper GPU, with dtypes
    the kernel takes, and sizes it takes where they are known now (symbolic sizes, and
    layouts and alignment, are checked at run time)."""
    if beta != 1 or alpha != 1:
        return False
    device = self.get_device()
    if device is None or not on_hopper(device):
        return False
    if not dtypes_supported(self.get_dtype(), mat1.get_dtype(), mat2.get_dtype()):
        return False
    try:
        m, k = (int(size) for size in mat1.get_size())
        n = int(mat2.get_size()[-1])
    except TypeError:  # a symbolic size: the call decides
        return True
    return sizes_supported(self.get_dtype(), m, n, k)


def lowering_over(op: torch._ops.OpOverload, what: str, stock: Any) -> Any:
    """A lowering of the in-place ``op`` that routes supported steps to ``accumulate_``
    and calls ``stock`` (the lowering it wraps, kept in ``.stock``) for the rest, or
    reinplace's own lowering where nothing is under it (``reinplace`` rolled back under
    it: the installer rolls this feature back with it)."""
    from torch._inductor import lowering as L

    from .lowerings import as_registered_lowering

    own = as_registered_lowering(op, lower_addmm_dtype_ if what == "addmm.dtype" else lower_addmm_)

    def lower(self, mat1, mat2, *rest, beta=1, alpha=1):
        if not routes_here(self, mat1, mat2, beta, alpha):
            under = own if entry.stock is ABSENT else entry.stock
            return under(self, mat1, mat2, *rest, beta=beta, alpha=alpha)
        count(what, NAME)
        self.realize()  # mutate the buffer that ``self`` names, not a copy of a lazy value
        L.fallback_handler(accumulate_op(), add_to_fallback_set=False)(self, mat1, mat2)
        return self  # the buffer itself: a copy of it back into a graph input is a no-op

    lower.__name__ = f"{op._opname}_hopper_accumulate"
    lower.__doc__ = f"{op}: inductor_addmm_fix::accumulate_ on Hopper GPUs, else the wrapped lowering."
    entry = as_registered_lowering(op, lower)
    entry.stock = stock  # type: ignore[attr-defined]
    entry.splices = True  # type: ignore[attr-defined]  (calls through .stock: see registry.wrapper_over)
    return entry


def plan() -> list[Decision]:
    """Wrap the lowerings of the in-place accumulates that ``reinplace`` registered."""
    from torch._inductor import lowering as L

    lowerings = getattr(L, "lowerings", None)
    require(isinstance(lowerings, dict), "torch._inductor.lowering.lowerings dict")
    require(takes_parameter(L.register_lowering, "lowering_dict") is True, "register_lowering(lowering_dict=...)")
    require(callable(getattr(L, "fallback_handler", None)), "torch._inductor.lowering.fallback_handler")
    missing = hopper_accumulate.triton_supported()
    if missing is not None:
        raise Unavailable(f"needs {missing}")
    ops = [(addmm_dtype_inplace(), "addmm.dtype"), (aten.addmm_.default, "addmm")]
    if any(lowerings.get(op, ABSENT) is ABSENT for op, _ in ops):
        raise Unavailable("no lowering of the in-place accumulates to wrap (reinplace registers them)")
    accumulate_op()
    reason = (
        "cuBLAS adds the accumulator after the product (beta = 1); for a chunk's few rows that pass "
        "over it is a third of the step: the kernel overlaps it with the product"
    )
    patches = [
        Patch(f"inductor.lowering.{what}.in_place.hopper_accumulate",
              DictEntry(lowerings, op, "torch._inductor.lowering.lowerings", wraps=True),
              lambda stock, op=op, what=what: lowering_over(op, what, stock))
        for op, what in ops
    ]
    return [needed("inductor.hopper_accumulate", reason, patches, probe=hopper_accumulate.triton_supported,
                   obsolete_when=RETIRED_BY)]
