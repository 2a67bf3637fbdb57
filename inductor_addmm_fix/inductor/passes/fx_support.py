"""What the post-grad passes share: FX node values, sizes compared and estimated without
guards, fake values for new nodes, the accumulation steps and the marks passes leave on
them.  No pass imports another pass: what one pass leaves for another (a step's chunk
count, an op that takes a merged pair) is declared here.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
import torch.fx as fx

aten = torch.ops.aten

#: ``node.meta`` key: how many chunks an accumulation step accumulates (default 1); set by
#: ``accumulate_pairs`` on a merged step, read by ``chunk_order``.
CHUNKS_PER_STEP = "inductor_addmm_fix_chunks"
#: ``node.meta`` key: on a merged step, each chunk's operands, in chunk order (a list of
#: lists of nodes that the step reads); set by ``accumulate_pairs``, read by ``chunk_order``
#: to find each chunk's own work where one chunk has several matmuls of one size.
CHUNK_OPERANDS = "inductor_addmm_fix_chunk_operands"

#: name -> ``takes(first, second)``: the op (``op(acc, a, b, a2, b2)``) that accumulates a
#: pair of steps with each step's operands where they lie, or None where it does not take
#: them.  ``accumulate_pairs`` asks each; an entry is a patch of the feature that provides
#: the op (``accumulate_kernel``).
SPLITTERS: dict[str, Callable[[fx.Node, fx.Node], Any]] = {}


def accumulation_ops() -> tuple:
    """The ops of an accumulation step, ``acc = addmm(acc, a, b)``."""
    return (aten.addmm.default, aten.addmm.dtype)


def val(node: Any) -> Any:
    """The node's value (``meta["val"]``), None for anything else."""
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def same_sizes(a, b) -> bool:
    """Sizes (or strides) known equal without a guard: comparing symbolic sizes with
    ``==`` would guard on the answer and recompile the graph for other sizes."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return len(a) == len(b) and all(statically_known_true(x == y) for x, y in zip(a, b))


def size_hint(size: Any) -> int:
    """A size's value for the first compiled shape, without a guard (unknown: 8192, as
    Inductor assumes for unbacked sizes)."""
    if isinstance(size, int):
        return size
    from torch.fx.experimental import symbolic_shapes

    try:
        # torch 2.15 names it optimization_hint, 2.11 size_hint (hint_int warns there), 2.8 hint_int.
        hint = next(getattr(symbolic_shapes, n) for n in ("optimization_hint", "size_hint", "hint_int") if hasattr(symbolic_shapes, n))
        return int(hint(size, fallback=8192))
    except Exception:
        return 8192


class FakeValues:
    """Where new nodes' values are computed: the graph's fake mode, with guards
    suppressed (the values only describe the nodes; a guard here would be one more
    reason to recompile).  Enter it as often as needed."""

    def __init__(self, *nodes: fx.Node):
        from torch._guards import detect_fake_mode

        self.mode = detect_fake_mode([val(n) for n in nodes])
        self._stack: list[contextlib.ExitStack] = []

    def __enter__(self):
        stack = contextlib.ExitStack()
        if self.mode is not None:
            stack.enter_context(self.mode)
            if self.mode.shape_env is not None:
                stack.enter_context(self.mode.shape_env.suppress_guards())
        self._stack.append(stack)
        return self

    def __exit__(self, *exc):
        return self._stack.pop().__exit__(*exc)
