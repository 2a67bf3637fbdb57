"""User Triton kernels: the copy of a mutated view is a copy of the view, not of its storage.

AOTAutograd functionalizes a user Triton kernel that writes into its arguments
(``triton_kernel_wrapper_mutation``) into ``triton_kernel_wrapper_functional``: every
argument the kernel may write is copied first, the kernel writes the copy, and the
copy is scattered back.  The copy is ``clone_preserve_strides``: for a view at storage
offset ``o``, ``as_strided(view, (o + n,), (1,), 0).clone()`` viewed back at offset
``o`` -- a copy of the storage from its start.

Inside Inductor that view is often a slice of a buffer Inductor has not materialized
(Liger's FLCE writes each chunk's losses into ``loss_1d[a:b]`` of a ``zeros`` made in
the same graph).  Inductor then copies the slice alone into a fresh buffer of ``n``
elements, and the ``as_strided`` reads ``o + n`` elements from it: past its end.  The
rows the kernel does not write (Liger skips ``ignore_index`` rows) come back holding
whatever memory followed, and the loss is wrong.  With static shapes the views patch
(``inductor/views.py``) realizes the sliced buffer first; where the offset is symbolic
(``capture_scalar_outputs=True`` after a shape change, or ``dynamic=True``) the graph
re-applies it through ``sym_storage_offset`` and that repair does not hold.

A kernel sees a data pointer and strides, never the storage around its arguments.  For
a view whose elements cover its extent without overlap (non-overlapping and dense) we
copy just the view, into storage of its own with the view's sizes and strides at
offset 0 (``empty_strided`` + ``copy_``): the same elements, nothing read outside them,
at any offset, static or symbolic.  Other views (expanded, or with gaps a kernel might
read) keep the stock copy.

Upstream: pytorch/pytorch#161115; PR #184050 (the same idea for every view) was
reverted; PR #192227 (in torch 2.15: ``_clone_mutated_arg``) clones a dense view alone,
and the probe then finds nothing to do.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..patching.declare import Decision, needed, not_needed, require
from ..patching.probes import global_names
from ..patching.registry import Patch
from ..patching.slots import Attribute

RETIRED_BY = "pytorch/pytorch#192227 (torch 2.15): the copy of a dense mutated view is the view alone"
NAME = "triton.clone_of_mutated_views"


def _dense(x: torch.Tensor) -> bool:
    """Non-overlapping and dense, decided without adding guards (False when unsure)."""
    import torch._prims_common as prims

    check = getattr(prims, "is_non_overlapping_and_dense_or_false", None)
    try:
        if check is not None:
            return bool(check(x))
        return bool(prims.is_non_overlapping_and_dense(x))
    except Exception:  # symbolic sizes a probe cannot decide: keep the stock copy
        return False


def copy_of_mutated_view(stock: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``clone_preserve_strides`` for the arguments a user Triton kernel writes."""

    def clone_preserve_strides(x: torch.Tensor) -> torch.Tensor:
        if not _dense(x):
            return stock(x)
        out = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
        out.copy_(x)
        return out

    clone_preserve_strides.__doc__ = (
        "A copy of the view's elements with its sizes and strides, at offset 0 of storage of its "
        "own (inductor_addmm_fix); views that overlap or have gaps keep the stock copy."
    )
    clone_preserve_strides.stock = stock  # type: ignore[attr-defined]
    return clone_preserve_strides


def _stock_copy() -> Callable[[torch.Tensor], torch.Tensor]:
    """What the functional kernel wrapper copies a mutated argument with, in stock torch:
    ``_clone_mutated_arg`` where torch has it (2.15: it copies a dense view alone,
    pytorch/pytorch#192227), else ``clone_preserve_strides`` (the one ours wraps)."""
    from torch._higher_order_ops import triton_kernel_wrap

    if callable(getattr(triton_kernel_wrap, "_clone_mutated_arg", None)):
        return lambda view: triton_kernel_wrap._clone_mutated_arg("arg", view, None)
    current = triton_kernel_wrap.clone_preserve_strides
    return getattr(current, "stock", current)


def stock_copy_reads_storage_before_the_view() -> bool:
    """Whether stock torch's copy of ``base[2:4]`` for a kernel copies storage from before
    the view (what reads past Inductor's copy of an unrealized slice)."""
    view = torch.zeros(6)[2:4]
    copy = _stock_copy()(view)
    return copy.untyped_storage().nbytes() > view.numel() * view.element_size()


def plan() -> list[Decision]:
    from torch._higher_order_ops import triton_kernel_wrap

    probe = stock_copy_reads_storage_before_the_view
    if not probe():
        return [not_needed(NAME, "the copy of a mutated view copies the view alone", probe=probe, obsolete_when=RETIRED_BY)]
    dense = getattr(triton_kernel_wrap, "triton_kernel_wrapper_functional_dense", None)
    require(callable(dense), "torch._higher_order_ops.triton_kernel_wrap.triton_kernel_wrapper_functional_dense")
    # The functional kernel wrapper must call the copy through the module's global name.
    require(
        "clone_preserve_strides" in global_names(dense),
        "clone_preserve_strides called by name from triton_kernel_wrapper_functional_dense",
    )
    slot = Attribute(triton_kernel_wrap, "clone_preserve_strides", "torch._higher_order_ops.triton_kernel_wrap")
    reason = (
        "user Triton kernels write a copy of each mutated view made from the start of its storage; "
        "Inductor copies an unrealized slice alone and that copy is read past its end (wrong Liger "
        "FLCE losses with capture_scalar_outputs after a shape change, or dynamic=True)"
    )
    return [needed(NAME, reason, [Patch(NAME, slot, copy_of_mutated_view)], probe=probe, obsolete_when=RETIRED_BY)]
