"""The memory cost of merging two accumulation steps into one, and what a pair may cost:
the bound the package holds a compiled step to against eager's memory, or the budget the
environment sets.  ``accumulate_pairs`` merges a chain only where its pairs fit.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from ...settings import PAIR_BUDGET
from .adjacent_slices import adjacent_slices
from .fx_support import size_hint, val

aten = torch.ops.aten

# The extra memory a merged pair may always take, and the share of the accumulator's size
# it may take where that is more: the bound the package holds a compiled step to against
# eager (docs/gpu-results.md).
FLOOR_BYTES = 64 << 20
ACCUMULATOR_SHARE = 0.05


def value_bytes(value: Any, dtype: torch.dtype | None = None) -> int:
    numel = 1
    for size in value.shape:
        numel *= size_hint(size)
    return numel * (dtype or value.dtype).itemsize


def narrowing_cast_bytes(node: fx.Node) -> int:
    """Bytes of the largest cast of ``node``'s value to a narrower dtype among its users."""
    casts = (torch.ops.prims.convert_element_type.default, aten._to_copy.default)
    best = 0
    for user in node.users:
        if user.op != "call_function" or user.target not in casts:
            continue
        dtype = user.args[1] if user.target is casts[0] and len(user.args) > 1 else user.kwargs.get("dtype")
        value = val(node)
        if isinstance(dtype, torch.dtype) and value is not None and dtype.itemsize < value.dtype.itemsize:
            best = max(best, value_bytes(value, dtype))
    return best


def pair_cost(operands, split: bool = False) -> int:
    """Bytes a merged pair keeps alive beyond two separate steps, given each operand's two
    chunks (``[[g_1, g_2], [x_1, x_2]]``): for each operand that is not one slice already,
    the first chunk waiting for the second, and (unless ``split``: each chunk read where it
    lies) the ``cat`` of both.  0 where an operand is unknown (the pair is not merged)."""
    cost = 0
    for pieces in operands:
        if any(p is None or val(p) is None for p in pieces):
            return 0
        if adjacent_slices(pieces) is None:
            a, b = (value_bytes(val(p)) for p in pieces)
            cost += a if split else a + a + b
    return cost


def budget(chain: list[fx.Node]) -> int:
    """The extra memory a pair of ``chain`` may take: ``max(FLOOR_BYTES,
    ACCUMULATOR_SHARE`` of the accumulator), or what ``INDUCTOR_ADDMM_FIX_PAIR_BUDGET_MIB`` sets; and at
    least what a narrowing cast of the result allocates at the peak anyway."""
    chosen = PAIR_BUDGET.value()
    if chosen is None:
        accumulator = val(chain[-1])
        chosen = max(FLOOR_BYTES, int(ACCUMULATOR_SHARE * value_bytes(accumulator)) if accumulator is not None else 0)
    return max(chosen, narrowing_cast_bytes(chain[-1]))
