"""Inductor's peak-memory estimate counts the package's in-place accumulations as
writes, not as allocations.

``reinplace`` lowers an accumulation ``acc = addmm(acc, g.t(), x)`` to eager's out=
kernel into the accumulator (``aten.addmm.out`` / ``aten.addmm.dtype_out`` as a
``FallbackKernel``).  Such a kernel has a ``MultiOutputLayout``, and
``torch._inductor.memory.compute_size_for_scheduler_buffer`` sizes a buffer of that
layout as the sum of its users' ``MultiOutput`` values, allocated and never freed.  In a
chunk loop every accumulation is a user of every earlier one (they mutate one buffer),
so the estimate grows with the square of the chunk count: 2017 MiB for a JSD-shaped loop
of 64 chunks on the CPU that holds 5.4 MiB.  ``reorder_for_peak_memory`` keeps the order
with the lowest estimate, so it chose among its orders on wrong figures.

We size these kernels, and the values they return, at zero: they write into the
accumulator, whose own allocation is counted where it is made.  On that loop the estimate
becomes 1.5 MiB and the order it picks holds 1.44 MiB instead of 5.38
(``benchmarks/loop_memory.py``).

Upstream: none yet (the estimate of an out= fallback kernel's MultiOutputLayout).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

from ..patching.counters import count
from ..patching.declare import Decision, needed, not_needed, require
from ..patching.registry import Patch
from ..patching.slots import Attribute, stock_of

NAME = "inductor.out_accumulations_allocate_nothing"
RETIRED_BY = "none yet: compute_size_for_scheduler_buffer sizes an out= fallback by its users' outputs (torch 2.8-2.15)"
MODULE = "torch._inductor.memory"
PREFIX = "memory_estimate"  # counted as "memory_estimate:<event>"


def out_accumulations() -> frozenset:
    """The out= overloads ``reinplace`` lowers accumulations to."""
    aten = torch.ops.aten
    overloads = {aten.addmm.out}
    dtype_out = getattr(aten.addmm, "dtype_out", None)
    if dtype_out is not None:
        overloads.add(dtype_out)
    return frozenset(overloads)


def _writes_into_an_accumulator(node: Any, ops: frozenset) -> bool:
    from torch._inductor import ir

    if isinstance(node, ir.FallbackKernel):
        return getattr(node, "op_overload", None) in ops
    if isinstance(node, ir.MultiOutput):
        return any(_writes_into_an_accumulator(i, ops) for i in node.inputs if isinstance(i, ir.FallbackKernel))
    return False


def accumulations_sized_as_writes(stock: Callable[..., Any]) -> Callable[..., Any]:
    """``compute_size_for_scheduler_buffer`` with the out= accumulations at (0, 0)."""
    ops = out_accumulations()

    def compute_size_for_scheduler_buffer(name_to_buf, *args: Any, **kwargs: Any):
        sizes = stock(name_to_buf, *args, **kwargs)
        for name, buf in name_to_buf.items():
            if name in sizes and _writes_into_an_accumulator(buf.node, ops):
                if sizes[name] != (0, 0):
                    count(PREFIX, "out_accumulations")
                sizes[name] = (0, 0)
        return sizes

    compute_size_for_scheduler_buffer.stock = stock  # type: ignore[attr-defined]
    return compute_size_for_scheduler_buffer


def sizes_multi_outputs_by_their_users() -> bool:
    """Whether stock ``compute_size_for_scheduler_buffer`` sizes a ``MultiOutputLayout``
    buffer by its users' ``MultiOutput`` values (read from its source)."""
    from torch._inductor import memory

    source = inspect.getsource(stock_of(memory.compute_size_for_scheduler_buffer))
    return "MultiOutputLayout" in source and "sched_buf.users" in source


def plan() -> list[Decision]:
    from torch._inductor import memory

    from .reinplace import fallback_kernel_runs_out_variants

    require(callable(vars(memory).get("compute_size_for_scheduler_buffer")), f"{MODULE}.compute_size_for_scheduler_buffer")
    if fallback_kernel_runs_out_variants() is False:
        return [not_needed(NAME, "Inductor emits no out= fallback kernel on this torch: the accumulations run as "
                           "in-place ops (addmm_)", probe=fallback_kernel_runs_out_variants,
                           obsolete_when=RETIRED_BY)]  # fmt: skip
    probe = sizes_multi_outputs_by_their_users
    if not probe():
        return [not_needed(NAME, "Inductor does not size an out= fallback kernel by its users' outputs", probe=probe,
                           obsolete_when=RETIRED_BY)]  # fmt: skip
    slot = Attribute(memory, "compute_size_for_scheduler_buffer", MODULE)
    reason = (
        "Inductor's peak-memory estimate counts each in-place accumulation (an out= fallback kernel) as an allocation "
        "of its users' outputs, quadratic in a chunk loop's length, and reorders for memory on those figures"
    )
    return [needed(NAME, reason, [Patch(NAME, slot, accumulations_sized_as_writes)], probe=probe,
                   obsolete_when=RETIRED_BY)]  # fmt: skip
