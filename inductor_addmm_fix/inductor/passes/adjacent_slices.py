"""Whether slices of one tensor, one after the other, are one slice of it: the proof
``accumulate_pairs`` needs to read two chunks' rows as one slice instead of a ``cat``.
Static bounds are compared; symbolic ones (Liger's chunks of a symbolic row count,
``x[k*c : min((k+1)*c, BT)]``) are proven from the sizes' ranges, without a guard.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from .fx_support import val

aten = torch.ops.aten


def adjacent_slices(pieces: list[Any]) -> tuple | None:
    """(base, start, end) when the pieces are ``slice(base, 0, a_i, e_i)`` (step 1) whose
    rows, one after the other, are ``slice(base, 0, a_1, e_n)``'s, else None.

    Static bounds: ``0 <= a_i <= e_i == a_{i+1}``.  Symbolic bounds (a chunk loop over a symbolic row
    count, ``x[k*c : min((k+1)*c, BT)]``) when :func:`symbolic_adjacent` proves it."""
    ranges = []
    for p in pieces:
        if not (isinstance(p, fx.Node) and p.op == "call_function" and p.target is aten.slice.Tensor):
            return None
        args = list(p.args) + [None] * (5 - len(p.args))
        base, dim, start, end, step = args[:5]
        if dim != 0 or step not in (None, 1) or start is None or end is None:
            return None
        ranges.append((base, start, end))
    base = ranges[0][0]
    if any(r[0] is not base for r in ranges):
        return None
    if all(type(b) is int for r in ranges for b in r[1:]):
        if any(not 0 <= r[1] <= r[2] for r in ranges) or any(a[2] != b[1] for a, b in zip(ranges, ranges[1:])):
            return None
    elif not symbolic_adjacent([r[1] for r in ranges], [r[2] for r in ranges]):
        return None
    return base, ranges[0][1], ranges[-1][2]


def _expr(bound: Any) -> Any:
    """A slice bound as a sympy expression (an int, or a node's backed SymInt), else None."""
    import sympy

    if type(bound) is int:
        return sympy.Integer(bound)
    value = val(bound)
    if type(value) is int:
        return sympy.Integer(value)
    if isinstance(value, torch.SymInt):
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

        return None if free_unbacked_symbols(value) else value.node.expr
    return None


def _is_min(expr: Any) -> bool:
    """``expr`` is a minimum: sympy's ``Min``, or torch's own (torch.utils._sympy)."""
    import sympy

    try:
        from torch.utils._sympy.functions import Min as TorchMin
    except ImportError:  # older torch: sympy's
        TorchMin = sympy.Min
    return isinstance(expr, (sympy.Min, TorchMin))


def symbolic_adjacent(starts: list[Any], ends: list[Any]) -> bool:
    """Whether rows ``[a_i, e_i)`` of one tensor, one after the other, are rows
    ``[a_1, e_n)``, for symbolic bounds: every end but the last is the next start
    (``e_i == a_{i+1}``, and ``a_n <= e_n``), or every end is ``min(a_{i+1}, X)`` with one
    ``X`` (the last ``min(b, X)``, ``a_n <= b``); in both, ``0 <= a_1 <= ... <= a_n`` known
    from the sizes' ranges without a guard.

    Why the second form holds: a slice's rows are ``[min(a, S), min(S, max(a, e)))`` of
    the tensor's ``S`` rows.  With ``m = min(X, S)`` range ``i`` is ``[a_i, a_{i+1})``
    while ``a_{i+1} <= m``, then ``[a_i, m)`` for the first ``a_{i+1} > m``, then empty;
    together ``[a_1, min(b, m))`` (empty if ``a_1 >= m``): ``slice(a_1, min(b, X))``'s
    rows.  ``X`` may be of unknown sign (Liger's ``BT``, a Python int of the resumed
    frame): a negative end does not count from the end here, since torch either guarded
    its sign while tracing (then it is known) or computed the slices' sizes by the
    formula above (then the graph means that formula)."""
    import sympy

    a = [_expr(s) for s in starts]
    e = [_expr(s) for s in ends]
    if any(x is None for x in a + e):
        return False
    env = next((v.node.shape_env for v in map(val, starts + ends) if isinstance(v, torch.SymInt)), None)
    if env is None:
        return False

    def known(expr) -> bool:
        try:
            return env._maybe_evaluate_static(expr) == sympy.true
        except Exception:
            return False

    sorted_from_zero = known(sympy.Ge(a[0], 0)) and all(known(sympy.Le(x, y)) for x, y in zip(a, a[1:]))
    if all(e[i] == a[i + 1] for i in range(len(a) - 1)):
        return sorted_from_zero and known(sympy.Le(a[-1], e[-1]))
    if not all(_is_min(end) for end in e):
        return False
    clamp = None
    for end, nxt in zip(e, a[1:]):
        if nxt not in end.args:
            return False
        x = frozenset(arg for arg in end.args if arg != nxt)
        if clamp is not None and x != clamp:
            return False
        clamp = x
    last = [b for b in e[-1].args if frozenset(arg for arg in e[-1].args if arg != b) == clamp]
    if not last:
        return False
    return sorted_from_zero and known(sympy.Le(a[-1], last[0]))
