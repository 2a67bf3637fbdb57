"""Dynamo: ``triton.next_power_of_2`` of a symbolic size is found by comparisons.

Triton's ``next_power_of_2`` rounds up by bit twiddling (``n -= 1; n |= n >> 1; ...
n |= n >> 32; n += 1``).  Dynamo traces that on a ``SymInt`` as it is written: the result
is a nest of six ``BitwiseFn_bitwise_or`` and shifts of the size.  Liger's FLCE computes
its chunk size so, ``next_power_of_2(cdiv(BT, V // H))``, and every chunk's slice bounds
then carry that nest (``Min(BT, k * <nest>)``).  With dynamic shapes, Inductor's index
simplification spends minutes on them: on the CPU, Liger's kernels interpreted, the
recompile of FLCE for a new row count with ``capture_scalar_outputs=True`` takes 175-190 s
(90% in ``SizeVarAllocator._simplify_with_ranges``) where it takes 12 s with the chunk
size found as below.

We trace ``p = 1; while p < n: p *= 2`` instead: the same value, found by comparisons
that Dynamo records as guards on the size's range (``16 < n <= 32``), so the chunk size
is a constant for every size of that range and the slices are simple expressions.  A
size outside the range recompiles once for its own range, where the stock trace would
not; Liger's loop, whose number of chunks Dynamo already specializes, recompiles at
those sizes anyway.

Only a chunk size is redirected: an integer division of a size, an expression with a
tensor's dimension among its symbols and a floor or ceiling division in it (Liger's
``cdiv(BT, cdiv(V, chunk_mem_const * H))``, where ``chunk_mem_const`` is a symbolic int
under ``dynamic=True``).  Everything else keeps Triton's expression, because there the
stock trace compiles fewer graphs than comparisons would: a block size of a dimension
(``min(next_power_of_2(n), 4096)`` as a kernel's constexpr guards on the clipped value,
one graph for every ``n`` above 2048, and a grid or a scalar use guards on nothing), a
symbolic Python int or a value read with ``.item()`` (one graph for every value), and an
expression with an unbacked symbol (no value to compare while tracing).  Eager code and
Triton's own use are untouched.

Upstream: none known (a Dynamo polyfill for ``triton.next_power_of_2``, or sympy
handling of the bitwise nest, would retire it).
"""

from __future__ import annotations

from typing import Any, Callable

from ..patching.declare import Decision, Unavailable, needed, not_needed, require
from ..patching.registry import Patch
from ..patching.slots import Attribute

NAME = "dynamo.next_power_of_2_by_comparisons"
RETIRED_BY = "none known: Dynamo traces triton.next_power_of_2's bit twiddling on a SymInt"


def next_power_of_2_by_comparisons(n):
    """``triton.next_power_of_2(n)`` for ``n >= 1`` (and 0 below, as Triton's gives)."""
    if n <= 0:
        return 0
    p = 1
    while p < n:
        p *= 2
    return p


def triton_next_power_of_2() -> Callable[..., Any] | None:
    """The Python function behind ``triton.next_power_of_2`` (a ``ConstexprFunction``
    since Triton 3.5, a plain function before), or None without Triton."""
    try:
        import triton
    except Exception:  # not installed, or a broken install: nothing calls it then
        return None
    fn = getattr(triton, "next_power_of_2", None)
    fn = getattr(fn, "fn", fn)
    return fn if callable(fn) and hasattr(fn, "__code__") else None


def is_a_chunk_size(tx, value) -> bool:
    """Whether ``value`` (a ``SymInt``) divides the size of a tensor into parts: one of its
    symbols has a tensor's dimension as its source, none is unbacked, and its expression
    holds a floor or ceiling division."""
    import torch
    from torch._dynamo.source import TensorProperty, TensorPropertySource
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    from torch.utils._sympy import functions

    if not isinstance(value, torch.SymInt) or free_unbacked_symbols(value):
        return False
    divisions = tuple(getattr(functions, name) for name in ("FloorDiv", "CeilDiv") if hasattr(functions, name))
    if not value.node.expr.has(*divisions):
        return False
    sources = tx.output.shape_env.var_to_sources
    return any(
        isinstance(source, TensorPropertySource) and source.prop is TensorProperty.SIZE
        for symbol in value.node.expr.free_symbols
        for source in sources.get(symbol, ())
    )


def redirect(stock: Callable[..., Any], targets: Callable[[], Any]) -> Callable[..., Any]:
    """``UserFunctionVariable.call_function`` that traces
    :func:`next_power_of_2_by_comparisons` where ``self.fn`` is one of ``targets()`` and
    its symbolic arguments are chunk sizes (:func:`is_a_chunk_size`)."""
    from torch._dynamo.variables import SymNodeVariable
    from torch._dynamo.variables.functions import UserFunctionVariable

    def call_function(self, tx, args, kwargs):
        fn = getattr(self, "fn", None)
        if getattr(fn, "__name__", None) == "next_power_of_2" and fn in targets():
            symbolic = [a for a in args if isinstance(a, SymNodeVariable)]
            if symbolic and all(is_a_chunk_size(tx, a.sym_num) for a in symbolic):
                return call_function.stock(UserFunctionVariable(next_power_of_2_by_comparisons), tx, args, kwargs)
        return call_function.stock(self, tx, args, kwargs)

    call_function.stock = stock  # type: ignore[attr-defined]
    call_function.splices = True  # type: ignore[attr-defined]  (calls through .stock: see slots.wrapper_over)
    return call_function


def _targets() -> tuple:
    fn = triton_next_power_of_2()
    return (fn,) if fn is not None else ()


def builds_bitwise_nest(fn: Callable[..., Any] | None = None) -> bool:
    """Whether ``fn`` (default: Triton's) of a symbolic size is an expression with
    bitwise operations, on a scratch ShapeEnv."""
    import torch
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    fn = fn or triton_next_power_of_2()
    if fn is None:
        return False
    shape_env = ShapeEnv()
    symbol = shape_env.create_symbol(24, ConstantSource("inductor_addmm_fix_pow2_probe"), dynamic_dim=DimDynamic.DYNAMIC)
    result = fn(shape_env.create_symintnode(symbol, hint=24))
    if not isinstance(result, torch.SymInt):
        return False
    return "bitwise" in str(result.node.expr).lower()


def plan() -> list[Decision]:
    from torch._dynamo.variables.functions import UserFunctionVariable

    require(callable(vars(UserFunctionVariable).get("call_function")), "UserFunctionVariable.call_function")
    probe = builds_bitwise_nest
    if triton_next_power_of_2() is None:
        raise Unavailable("Triton is not installed: nothing calls triton.next_power_of_2")
    if not probe():
        return [not_needed(NAME, "triton.next_power_of_2 of a symbolic size is a simple expression", probe=probe, obsolete_when=RETIRED_BY)]
    slot = Attribute(UserFunctionVariable, "call_function", "torch._dynamo.variables.functions.UserFunctionVariable")
    reason = (
        "Dynamo traces triton.next_power_of_2 of a symbolic size as a nest of bitwise ors; Liger FLCE's "
        "chunk bounds carry it and Inductor spends minutes simplifying them on each dynamic recompile"
    )
    return [needed(NAME, reason, [Patch(NAME, slot, lambda stock: redirect(stock, _targets))], probe=probe, obsolete_when=RETIRED_BY)]
