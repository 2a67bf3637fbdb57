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

Merged pairs: ``accumulate_pairs`` merges two consecutive steps into one; where the two
chunks are separate tensors (Liger's, each its own logits buffer) it stacks them with a
``cat``, three chunks of memory more than eager, too many for a bf16 accumulator.  This
feature gives that pass a splitter (:func:`takes_pair`, an entry of
``fx_support.SPLITTERS``): on a Hopper GPU, where the kernel takes each step, the
pair becomes ``inductor_addmm_fix::addmm_pair(acc, a, b, a2, b2)``, which Inductor's
re-inplacing pass turns into ``addmm_pair_`` (an entry of its table that this feature
adds, restricted to accumulation chains as ``reinplace``'s), lowered to
``accumulate_pair_``: the pair kernel (:func:`.hopper_accumulate.accumulate_pair`, one
pass over C for both chunks, each read where it lies), or the two steps one after the
other where a call's operands are not the kernel's.  One chunk of memory more than
eager (the first waits for the second), no copy.  Counted as ``pair:hopper_accumulate``.

Upstream: none (a kernel of this package; cuBLAS has no overlapped ``beta = 1``).
"""

from __future__ import annotations

from typing import Any

import torch

from ..patching.counters import count
from ..patching.declare import Decision, Unavailable, needed, require
from ..patching.ops import package_op
from ..patching.probes import takes_parameter
from ..patching.registry import Patch
from ..patching.slots import ABSENT, DictEntry
from . import hopper_accumulate
from .hopper_accumulate import dtypes_supported, on_hopper, pair_sizes_supported, sizes_supported
from .reinplace import addmm_dtype_eager, addmm_dtype_inplace, is_accumulation, lower_addmm_, lower_addmm_dtype_

aten = torch.ops.aten
NAME = "hopper_accumulate"  # counted as "<op>:hopper_accumulate"
RETIRED_BY = "none: a kernel of this package (cuBLAS runs beta = 1 after the product)"
_SCHEMA = "accumulate_(Tensor(a!) self, Tensor mat1, Tensor mat2) -> ()"
_PAIR_SCHEMA = "accumulate_pair_(Tensor(a!) self, Tensor mat1, Tensor mat2, Tensor mat1b, Tensor mat2b) -> ()"
_ADDMM_PAIR_SCHEMA = "addmm_pair(Tensor self, Tensor mat1, Tensor mat2, Tensor mat1b, Tensor mat2b) -> Tensor"
_ADDMM_PAIR_INPLACE_SCHEMA = (
    "addmm_pair_(Tensor(a!) self, Tensor mat1, Tensor mat2, Tensor mat1b, Tensor mat2b) -> Tensor(a!)"
)


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


def _accumulate_pair_(self, mat1, mat2, mat1b, mat2b):
    """self += mat1 @ mat2 + mat1b @ mat2b in place: the pair kernel where it applies (one
    pass over ``self``), else the two steps one after the other, each as ``accumulate_``
    runs it."""
    if hopper_accumulate.accumulate_pair_if_supported(self, mat1, mat2, mat1b, mat2b):
        return
    _accumulate_(self, mat1, mat2)
    _accumulate_(self, mat1b, mat2b)


def accumulate_pair_op() -> torch._ops.OpOverload:
    """``torch.ops.inductor_addmm_fix.accumulate_pair_.default``, defined on first use."""
    return package_op("accumulate_pair_", _PAIR_SCHEMA,
                      {"CompositeExplicitAutograd": _accumulate_pair_, "Meta": lambda *args: None})


def _addmm_pair(self, mat1, mat2, mat1b, mat2b):
    out = self.clone(memory_format=torch.contiguous_format)
    _accumulate_pair_(out, mat1, mat2, mat1b, mat2b)
    return out


def _addmm_pair_(self, mat1, mat2, mat1b, mat2b):
    _accumulate_pair_(self, mat1, mat2, mat1b, mat2b)
    return self


def addmm_pair_op() -> torch._ops.OpOverload:
    """``torch.ops.inductor_addmm_fix.addmm_pair.default``: ``self + mat1 @ mat2 + mat1b @
    mat2b`` in ``self``'s dtype (the products in fp32), a new tensor.  What
    ``accumulate_pairs`` puts in a post-grad graph for a merged pair whose chunks stay
    where they lie; re-inplaced to :func:`addmm_pair_inplace_op`."""
    meta = lambda self, *mats: torch.empty_like(self, memory_format=torch.contiguous_format)  # noqa: E731
    return package_op("addmm_pair", _ADDMM_PAIR_SCHEMA, {"CompositeExplicitAutograd": _addmm_pair, "Meta": meta})


def addmm_pair_inplace_op() -> torch._ops.OpOverload:
    """``torch.ops.inductor_addmm_fix.addmm_pair_.default``: :func:`addmm_pair_op` into ``self``."""
    return package_op("addmm_pair_", _ADDMM_PAIR_INPLACE_SCHEMA,
                      {"CompositeExplicitAutograd": _addmm_pair_, "Meta": lambda self, *mats: self})


def takes_pair(first: Any, second: Any) -> torch._ops.OpOverload | None:
    """For ``accumulate_pairs``: the op that accumulates two consecutive steps (FX nodes
    ``addmm(acc, a, b)`` then ``addmm(first, a2, b2)``) in one pass over the accumulator
    with each step's operands where they lie, where the pair kernel takes them: a
    Hopper GPU, dtypes it takes, both steps' rows within :func:`.hopper_accumulate.max_k`
    (sizes read from their hints where symbolic: each call checks its own).  Else None."""
    from .passes.fx_support import size_hint

    val = lambda node: node.meta.get("val") if hasattr(node, "meta") else None  # noqa: E731
    acc, a, b, a2, b2 = (val(n) for n in (first.args[0], first.args[1], first.args[2], second.args[1], second.args[2]))
    result = val(second)
    if not all(isinstance(t, torch.Tensor) for t in (acc, a, b, a2, b2, result)):
        return None
    if not on_hopper(result.device) or acc.dtype != result.dtype:
        return None
    if not (dtypes_supported(result.dtype, a.dtype, b.dtype) and a2.dtype == a.dtype and b2.dtype == b.dtype):
        return None
    m, k, n, k2 = (size_hint(s) for s in (*a.shape, b.shape[-1], a2.shape[-1]))
    return addmm_pair_op() if pair_sizes_supported(result.dtype, m, n, k, k2) else None


def lower_addmm_pair_(self, mat1, mat2, mat1b, mat2b):
    """addmm_pair_: ``accumulate_pair_`` into ``self``'s buffer (kernel or cuBLAS, decided
    per call)."""
    from torch._inductor import lowering as L

    count("pair", NAME)
    self.realize()  # mutate the buffer that ``self`` names, not a copy of a lazy value
    L.fallback_handler(accumulate_pair_op(), add_to_fallback_set=False)(self, mat1, mat2, mat1b, mat2b)
    return self


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

    from .lowering_table import as_registered_lowering

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
    entry.splices = True  # type: ignore[attr-defined]  (calls through .stock: see slots.wrapper_over)
    return entry


def idle_here() -> str | None:
    """None where this process sees a GPU the kernel runs on, else what it lacks (the
    status shows it beside "applied")."""
    if torch.cuda.is_available() and any(
        hopper_accumulate.on_hopper(torch.device("cuda", i)) for i in range(torch.cuda.device_count())
    ):
        return None
    return "no Hopper GPU here (CUDA capability 9.0)"


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
                   obsolete_when=RETIRED_BY), _plan_pairs(lowerings)]


def _plan_pairs(lowerings: dict) -> Decision:
    """``accumulate_pairs`` merges a pair of steps into ``addmm_pair`` (no ``cat`` of the
    chunks) where the pair kernel takes it; Inductor re-inplaces that to ``addmm_pair_``,
    lowered to ``accumulate_pair_``."""
    from torch._inductor.fx_passes import reinplace

    from .lowering_table import as_registered_lowering
    from .passes import fx_support

    table = getattr(reinplace, "inplaceable_ops", None)
    require(isinstance(table, dict), "torch._inductor.fx_passes.reinplace.inplaceable_ops dict")
    functional, inplace = addmm_pair_op(), addmm_pair_inplace_op()
    accumulate_pair_op()
    reason = (
        "a merged pair of chunks stacked by a cat costs three chunks of memory and a copy; "
        "the pair kernel reads each chunk where it lies, one pass over the accumulator for both"
    )
    patches = [
        Patch("inductor.accumulate_pairs.split.hopper_accumulate",
              DictEntry(fx_support.SPLITTERS, NAME, "inductor_addmm_fix accumulate_pairs splitters"), takes_pair),
        Patch("inductor.reinplace.addmm_pair",
              DictEntry(table, functional, "torch._inductor.fx_passes.reinplace.inplaceable_ops"),
              reinplace.InplaceableOp(inplace, 0, extra_check=is_accumulation)),
        Patch("inductor.lowering.addmm_pair_.hopper_accumulate",
              DictEntry(lowerings, inplace, "torch._inductor.lowering.lowerings"),
              as_registered_lowering(inplace, lower_addmm_pair_)),
    ]
    return needed("inductor.hopper_accumulate.pairs", reason, patches, probe=hopper_accumulate.triton_supported,
                  obsolete_when=RETIRED_BY)
