"""``as_strided`` of a slice of a not-yet-materialized buffer reads past its end.

Not an out_dtype bug, but it breaks the same workload: under Inductor
Liger FLCE returns a wrong, changing loss whenever some targets equal
``ignore_index`` or class weights are given, and can die with an illegal memory
access in a ``*_fused_as_strided_slice_*`` kernel.

When a user Triton kernel's argument is a view and must be cloned, Inductor's
``clone_preserve_strides`` emits ``as_strided(view, (offset + n,), (1,), 0)``.
If the view is a slice of a buffer that Inductor has not realized yet,
``GraphLowering.run_node`` (its ``is_input_for_as_strided`` branch) copies the
slice into a fresh buffer of the slice's size at offset 0, and ``as_strided``
then reads ``offset + n`` elements from it.  Plain PyTorch shows it::

    s = base + 1
    torch.as_strided(s[64:128], (128,), (1,), 0)   # garbage under Inductor

The fix: when a slice or select feeds an ``as_strided`` op, realize the sliced
buffer first, so the slice lowers to a view of real storage with its offset and
``as_strided`` addresses that storage, as in eager.  Views whose offset the graph
re-applies symbolically are left to stock Inductor, which is self-consistent
there (see ``_feeds_as_strided_with_a_fixed_offset``).

Upstream: pytorch/pytorch#161115; PR #184050 fixed the Triton-clone half and was
reverted.  Retire this patch when that lands.  The bug report:
docs/upstream/as-strided-of-a-slice.md.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..patching.declare import Decision, PlanError, needed, not_needed, require
from ..patching.probes import ProbeError, aten_op, inductor_lowering
from ..patching.registry import Patch
from ..patching.slots import DictEntry

aten = torch.ops.aten
RETIRED_BY = "pytorch/pytorch#161115 (PR #184050, reverted): Triton-kernel clones of views"

#: The views whose FX node may feed as_strided with a non-zero storage offset.
VIEW_OPS = ("slice.Tensor", "select.int")
AS_STRIDED_OPS = (aten.as_strided.default, aten.as_strided_.default, aten.as_strided_scatter.default)


def _feeds_as_strided_with_a_fixed_offset() -> bool:
    """The view being lowered feeds as_strided, and nothing re-applies its offset
    through ``sym_storage_offset``.

    That op appears where a clone of the view is made at a symbolic offset
    (``clone_preserve_strides`` under dynamic shapes).  The generated code then
    addressed the clone at offset 0: consistent with stock Inductor's copy of the
    view, not with a realized view.  Under Liger FLCE with dynamic=True,
    realizing there made the user Triton kernel write chunk k's losses at offset 0
    of a clone that held chunk 0's, so the ignored rows kept chunk 0's values (a
    wrong loss); stock was right.  Such views are left to stock Inductor."""
    from torch._inductor.virtualized import V

    node = getattr(V.graph, "current_node", None)
    if node is None or not any(user.target in AS_STRIDED_OPS for user in node.users):
        return False
    return not any(user.target is aten.sym_storage_offset.default for user in node.users)


def realize_base_before_view(stock: Callable[..., Any]) -> Callable[..., Any]:
    """A view lowering that first realizes its input when the view feeds as_strided."""
    from torch._inductor import ir

    def view_lowering(x, *args, **kwargs):
        if isinstance(x, ir.TensorBox) and _feeds_as_strided_with_a_fixed_offset():
            x.realize()
        return stock(x, *args, **kwargs)

    view_lowering.__name__ = f"realize_base_then_{getattr(stock, '__name__', 'view')}"
    view_lowering.__doc__ = "slice/select: realize the sliced buffer when the view feeds as_strided."
    return view_lowering


def as_strided_of_a_slice_reads_past_its_storage() -> bool | None:
    """Whether stock Inductor lowers ``as_strided(s[64:128], (128,), (1,), 0)``, with
    ``s`` unrealized, to a view that reaches past the end of the buffer it reads (the
    copy of the slice).  A scratch graph is lowered, no code generated.  A lowering
    that fails (torch 2.15 raises) counts as broken too: realizing first is right on
    any torch.  None if the probe cannot run here."""

    def f(base):
        return torch.as_strided((base + 1)[64:128], (128,), (1,), 0)

    lowered = False
    try:
        with inductor_lowering(f, (256,)) as graph:
            lowered = True
            return _reads_past_its_storage(graph.graph_outputs[0])
    except ProbeError:
        return None
    except Exception:
        return None if lowered else True


def _reads_past_its_storage(view: Any) -> bool:
    from torch._inductor import ir

    layout = view.get_layout()
    storage = view
    while not isinstance(storage, ir.Buffer):
        storage = storage.data
    numel = 1
    for size in storage.get_size():
        numel *= int(size)
    extent = int(layout.offset) + sum((int(n) - 1) * int(s) for n, s in zip(layout.size, layout.stride)) + 1
    return numel < extent


def plan() -> list[Decision]:
    """Wrap the lowerings of the views that may feed as_strided, where stock Inductor
    reads past a copy."""
    from torch._inductor import lowering as L

    name = "inductor.as_strided_of_view"
    lowerings = getattr(L, "lowerings", None)
    require(isinstance(lowerings, dict), "torch._inductor.lowering.lowerings dict")
    probe = as_strided_of_a_slice_reads_past_its_storage
    broken = probe()
    require(broken is not None, "lowering of as_strided that this package can probe")
    if not broken:
        return [not_needed(name, "as_strided of a slice reads within its storage", probe=probe, obsolete_when=RETIRED_BY)]
    patches = []
    for qualname in VIEW_OPS:
        op = aten_op(qualname)
        stock = lowerings.get(op)
        require(stock is not None, f"Inductor lowering for aten.{qualname}")
        slot = DictEntry(lowerings, op, "torch._inductor.lowering.lowerings")
        patches.append(Patch(f"{name}.{qualname}", slot, realize_base_before_view(stock)))
    reason = (
        "as_strided of a slice of an unrealized buffer reads past a copy (wrong, changing "
        "Liger FLCE losses with ignore_index or class weights)"
    )
    return [needed(name, reason, patches, probe=probe, obsolete_when=RETIRED_BY)]


def self_test() -> None:
    """After patching, the probe's pattern reads within its storage."""
    if as_strided_of_a_slice_reads_past_its_storage() is not False:
        raise PlanError("self-test failed after patching: as_strided of a slice still reads past its storage")
