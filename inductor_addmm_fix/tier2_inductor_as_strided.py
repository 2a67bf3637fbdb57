"""Tier 2d: ``as_strided`` of a slice of a not-yet-materialized buffer reads past its end.

Not an out_dtype bug, but it breaks the same workload (issue 7): under Inductor
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
reverted (2026-05-19).  Retire this patch when that lands.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

aten = torch.ops.aten

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


def run_node_copies_views_for_as_strided() -> bool:
    """Whether this Inductor has the code path that loses the offset (2.8-2.15 do)."""
    import inspect

    from torch._inductor.graph import GraphLowering

    try:
        return "as_strided" in inspect.getsource(GraphLowering.run_node)
    except (OSError, TypeError):
        return False
