"""Accumulate in place, as eager does.

FLCE accumulates every chunk's weight gradient into one buffer with
``torch.addmm(buf, g.t(), x, out_dtype=fp32, out=buf)``.  AOTAutograd turns each
call into a functional ``addmm.dtype`` (new buffer) chained to the next one;
lowered as a product plus an epilogue, Inductor then fuses the epilogues of all
chunks into one kernel and keeps every chunk's product alive at once (62.6 GiB
at Llama-3 shapes).  Stock Inductor has the same chain for ``addmm.default``
(FLCE with ``accum_dtype=None``): a parameter-sized temporary per chunk.

Inductor's re-inplacing pass (``fx_passes/reinplace.py``) already turns
functional ops into in-place ones when the overwritten value is dead; it only
lacks entries for these two.  We add them, restricted to accumulation chains:
the accumulator is a fill (zeros), a graph input that the graph copies the
result back into (``out=`` on an input), or the result of a previous
accumulation.  The in-place ops are ``aten.addmm_`` and our
``inductor_addmm_fix::addmm_dtype_``, which runs eager's kernel (cuBLAS with
beta=1 into the buffer): bit for bit what eager computes, with no temporary.

Upstream: none yet (no in-place ``addmm.dtype`` exists in aten).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ..core.probes import eager_kernel_devices
from ..patching.counters import count
from ..patching.declare import Decision, PlanError, needed, not_needed, require
from ..patching.ops import package_op
from ..patching.probes import aten_op, inductor_lowering, takes_parameter
from ..patching.registry import Patch
from ..patching.slots import DictEntry

aten = torch.ops.aten
ACCUMULATE_IN_PLACE = "accumulate_in_place"  # counted as "<op>:accumulate_in_place"
RETIRED_BY = "none yet: Inductor's reinplace pass has no addmm entries (torch 2.15)"
_SCHEMA = (
    "addmm_dtype_(Tensor(a!) self, Tensor mat1, Tensor mat2, ScalarType out_dtype, *, "
    "Scalar beta=1, Scalar alpha=1) -> Tensor(a!)"
)


def addmm_dtype_eager(self, mat1, mat2, out_dtype, *, beta=1, alpha=1):
    """self = beta * self + alpha * (mat1 @ mat2) in out_dtype, in place.

    Only a marker in post-grad graphs: ``lower_addmm_dtype_`` lowers it.  This
    eager version exists for completeness (and for graphs run without Inductor)."""
    if self.device.type in eager_kernel_devices("addmm"):
        return aten.addmm.dtype_out(self, mat1, mat2, out_dtype, beta=beta, alpha=alpha, out=self)
    # No eager kernel (CPU): the product of the upcast operands, accumulated in out_dtype.
    return torch.addmm(self, mat1.to(out_dtype), mat2.to(out_dtype), beta=beta, alpha=alpha, out=self)


def lower_addmm_dtype_(self, mat1, mat2, out_dtype, *, beta=1, alpha=1):
    """addmm_dtype_: eager's addmm.dtype_out into ``self`` (cuBLAS, beta into the buffer);
    where eager has no kernel, ``addmm_`` on operands cast to out_dtype."""
    from torch._inductor import lowering as L

    count("addmm.dtype", ACCUMULATE_IN_PLACE)
    if self.get_device().type in eager_kernel_devices("addmm"):
        out = L.fallback_handler(aten.addmm.dtype_out, add_to_fallback_set=False)
        out(self, mat1, mat2, out_dtype, beta=beta, alpha=alpha, out=self)
        return self  # the out= buffer itself (checked on CUDA, torch 2.11)
    self.realize()  # mutate the buffer that ``self`` names, not a copy of a lazy value
    inplace = L.fallback_handler(aten.addmm_.default, add_to_fallback_set=False)
    # The in-place op's result is the alias Inductor's later reads must go through, and
    # the buffer it aliases must outlive it (see _keep_storage).
    return _keep_storage(self, inplace(self, L.to_dtype(mat1, out_dtype), L.to_dtype(mat2, out_dtype), beta=beta, alpha=alpha))


def lower_addmm_(self, mat1, mat2, *, beta=1, alpha=1):
    """addmm_: eager's ``addmm.out`` into ``self`` (cuBLAS with beta into the buffer).

    Returning ``self`` itself (not the in-place op's alias) makes the copy of the
    accumulated result back into a graph input a no-op (``copy_(dst, src)`` with
    ``dst is src``), as for ``addmm.dtype``; otherwise it is a parameter-sized copy
    per step.  Before torch 2.11 Inductor cannot emit out= fallbacks: the in-place op."""
    from torch._inductor import lowering as L

    count("addmm", ACCUMULATE_IN_PLACE)
    if fallback_kernel_runs_out_variants():
        out = L.fallback_handler(aten.addmm.out, add_to_fallback_set=False)
        out(self, mat1, mat2, beta=beta, alpha=alpha, out=self)
        return self
    self.realize()
    inplace = L.fallback_handler(aten.addmm_.default, add_to_fallback_set=False)
    return _keep_storage(self, inplace(self, mat1, mat2, beta=beta, alpha=alpha))


def _keep_storage(buffer, alias):
    """``alias``, the result of an in-place fallback on ``buffer``, after marking
    ``buffer`` never to be reused: Inductor's memory planning (torch 2.8-2.10 at least)
    frees a buffer after the in-place kernel that returned an alias of it and may give
    its storage to the next temporary of its size while the alias is still read (an
    accumulation over pairs of chunks lost its first pair that way)."""
    from torch._inductor.virtualized import V

    V.graph.never_reuse_buffers.add(buffer.get_name())
    return alias


@functools.cache
def fallback_kernel_runs_out_variants() -> bool | None:
    """Whether Inductor's FallbackKernel accepts an aten out= op (torch 2.11+; before,
    "NYI: Can't generate FallbackKernel"): lowers ``addmm.out`` into a graph input of a
    scratch graph.  None if the probe itself cannot run."""
    from torch._inductor import lowering as L
    from torch._inductor.virtualized import V

    try:
        with inductor_lowering(lambda acc, a, b: acc, (2, 2), (2, 2), (2, 2)) as graph:
            acc, a, b = graph.graph_inputs.values()
            node = next(n for n in graph.module.graph.nodes if n.op == "placeholder")
            with graph.set_current_node(node), V.set_current_node(node):
                try:
                    L.fallback_handler(aten.addmm.out, add_to_fallback_set=False)(acc, a, b, out=acc)
                except NotImplementedError:
                    return False
    except Exception:
        return None
    return True


def _addmm_dtype_meta(self, mat1, mat2, out_dtype, *, beta=1, alpha=1):
    return self


def addmm_dtype_inplace() -> torch._ops.OpOverload:
    """``torch.ops.inductor_addmm_fix.addmm_dtype_.default``, defined on first use."""
    return package_op("addmm_dtype_", _SCHEMA, {"CompositeExplicitAutograd": addmm_dtype_eager, "Meta": _addmm_dtype_meta})


_FILLS = {"full", "zeros", "zeros_like", "full_like", "new_zeros", "new_full", "scalar_tensor"}


def _accumulates(op: Any) -> bool:
    name = getattr(op, "__name__", "")  # e.g. "addmm.dtype", "addmm_.default"
    return name.split(".")[0] in ("addmm", "addmm_", "addmm_dtype_", "addmm_pair", "addmm_pair_")


def _can_hold_result(acc: torch.fx.Node, node: torch.fx.Node) -> bool:
    """The accumulator must have the result's shape and dtype and be contiguous
    (a broadcast bias cannot receive the result)."""
    old, new = acc.meta.get("val"), node.meta.get("val")
    if not (isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor)):
        return False
    if old.dtype != new.dtype or old.device != new.device or old.shape != new.shape:
        return False
    import torch._prims_common as prims_common

    contiguous_or_false = getattr(prims_common, "is_contiguous_or_false", None)
    return bool(contiguous_or_false(old) if contiguous_or_false else old.is_contiguous())


def _can_lower_in_place(node: torch.fx.Node) -> bool:
    """Where eager has a kernel (CUDA), the in-place lowering is an extern call of
    ``addmm.dtype_out``, which Inductor can emit only from torch 2.11."""
    val = node.meta.get("val")
    on_kernel_device = isinstance(val, torch.Tensor) and val.device.type in eager_kernel_devices("addmm")
    return not on_kernel_device or fallback_kernel_runs_out_variants()


def is_accumulation(node: torch.fx.Node) -> bool:
    """Re-inplace only accumulation chains: the accumulator is a fill, a graph input
    (Inductor's pass requires the graph to copy the result back into it), or the
    result of a previous accumulation.  Everything else keeps Inductor's lowering.

    Runs inside Inductor's pass: it must never raise (an error means "no")."""
    try:
        return _is_accumulation(node)
    except Exception:
        return False


def _is_accumulation(node: torch.fx.Node) -> bool:
    if node.target is aten.addmm.dtype and not _can_lower_in_place(node):
        return False
    acc = node.args[0]
    if not isinstance(acc, torch.fx.Node) or not _can_hold_result(acc, node):
        return False
    if acc.op == "placeholder":
        return True
    if acc.op != "call_function":
        return False
    name = getattr(acc.target, "__name__", "").split(".")[0]
    return name in _FILLS or _accumulates(acc.target)


def plan() -> list[Decision]:
    """Re-inplacing entries for ``addmm.dtype`` and ``addmm.default`` restricted to
    accumulation chains, and the lowerings of their in-place ops."""
    from torch._inductor import lowering as L
    from torch._inductor.fx_passes import reinplace

    from .lowering_table import as_registered_lowering

    table = getattr(reinplace, "inplaceable_ops", None)
    lowerings = getattr(L, "lowerings", None)
    require(isinstance(table, dict), "torch._inductor.fx_passes.reinplace.inplaceable_ops dict")
    require(isinstance(lowerings, dict), "torch._inductor.lowering.lowerings dict")
    require(takes_parameter(reinplace.InplaceableOp, "extra_check") is True, "InplaceableOp(extra_check=...)")
    require(takes_parameter(L.register_lowering, "lowering_dict") is True, "register_lowering(lowering_dict=...)")
    for helper in ("fallback_handler", "to_dtype"):  # what the in-place lowerings call
        require(callable(getattr(L, helper, None)), f"torch._inductor.lowering.{helper}")
    if fallback_kernel_runs_out_variants() is None:
        raise PlanError("could not probe whether Inductor's FallbackKernel accepts out= ops")
    decisions = []
    for functional, make_inplace, lower in (
        (aten_op("addmm.dtype"), addmm_dtype_inplace, lower_addmm_dtype_),
        (aten_op("addmm"), lambda: torch.ops.aten.addmm_.default, lower_addmm_),
    ):
        name = f"inductor.reinplace.addmm.{functional._overloadname}"
        if functional in table:
            decisions.append(not_needed(name, "Inductor already re-inplaces it", probe="torch._inductor.fx_passes.reinplace.inplaceable_ops", obsolete_when=RETIRED_BY))
            continue
        inplace = make_inplace()
        patches = [
            Patch(
                name,
                DictEntry(table, functional, "torch._inductor.fx_passes.reinplace.inplaceable_ops"),
                reinplace.InplaceableOp(inplace, 0, extra_check=is_accumulation),
            )
        ]
        if inplace not in lowerings:
            slot = DictEntry(lowerings, inplace, "torch._inductor.lowering.lowerings")
            patches.append(Patch(f"{name}.lowering", slot, as_registered_lowering(inplace, lower)))
        reason = (
            "accumulation chains (FLCE's addmm(..., out=grad_weight)) would allocate a "
            "parameter-sized buffer per chunk; run them in place like eager"
        )
        decisions.append(needed(name, reason, patches, probe="torch._inductor.fx_passes.reinplace.inplaceable_ops", obsolete_when=RETIRED_BY))
    return decisions
