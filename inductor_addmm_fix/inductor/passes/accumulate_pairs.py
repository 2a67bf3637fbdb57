"""Chunked accumulations update their accumulator once per two chunks (a post-grad pass).

Liger's FusedLinearCrossEntropy accumulates the weight gradient chunk by chunk,
``addmm(grad_weight, dlogits_k.t(), x_k, out=grad_weight)``.  With an fp32
``grad_weight`` of ``V x H`` (2 GiB for Llama-3's 128256 x 4096) every chunk reads and
writes the whole accumulator for a product of only ``K = 256`` rows: cuBLAS runs it
memory-bound, 1.65 ms a chunk on an H200, where the product alone needs about 0.34 ms.
Eager calls one chunk at a time; a compiler that sees the loop can do two chunks' products
in one pass over the accumulator (``K = 512``: 1.64 ms for both, measured in
``benchmarks/accumulate_k.py``), halving the accumulator traffic.

After functionalization the loop is a chain of ``addmm`` steps, each step's ``self`` the
previous one.  The pass rewrites each pair of consecutive steps::

    acc_1 = addmm(acc_0, permute(g_1), x_1)          acc_2 = addmm(acc_0,
    acc_2 = addmm(acc_1, permute(g_2), x_2)    ->        permute(cat([g_1, g_2])),
                                                         x[a_1:b_2])

where ``x_1``, ``x_2`` are adjacent slices of one tensor (else a ``cat`` too; the
same for the ``g``s).  Symbolic bounds count as adjacent where that is proven without a
guard: Liger's chunks of a symbolic row count, ``x[k*c : min((k+1)*c, BT)]``, are read
as one slice in the graph that training with changing shapes runs, as in the static one.  The sums
are the same sums in another order (fp32 accumulation stays fp32; bitwise equality with
eager does not hold).  It costs one chunk of dlogits more alive (the first of a pair
waits for the second) and a copy of both into the ``cat`` (0.03 ms a chunk); the
``chunk_order`` pass, which runs after this one, keeps every chunk's logits matmul in
order.  A chain of one step, and steps that are not plain ``addmm``/``addmm.dtype``
(``beta``, ``alpha`` other than 1, other layouts) are left as they are; the pass never
raises.

A feature that can accumulate a pair with each chunk's operands where they lie registers
a splitter in :data:`SPLITTERS` (``accumulate_kernel`` on Hopper GPUs: one kernel, one
pass over the accumulator); a pair it takes becomes its op instead of a ``cat``, costing
only the waiting chunk.  A chain is merged where its pairs' extra memory fits
:func:`pair_memory.budget` (the split form first, then the ``cat``), else left alone.  The budget is
``max(64 MiB, 5%`` of the accumulator), the bound the package holds a compiled step to
against eager's memory; ``INDUCTOR_ADDMM_FIX_PAIR_BUDGET_MIB`` sets another (more where
memory can be traded for speed, 0 for none), read at each compile.  Counted in
``torch._dynamo.utils.counters["inductor_addmm_fix"]``: ``accumulate_pairs:chains``,
``accumulate_pairs:pairs``, ``accumulate_pairs:split`` (pairs merged by a splitter's op),
``accumulate_pairs:over_budget`` (chains left alone for memory) and
``accumulate_pairs:error``.

Upstream: none (an optimization across eager calls).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.fx as fx

from ...settings import PAIR_BUDGET
from ...patching.counters import count
from ...patching.declare import Decision, Unavailable, needed
from . import post_grad_slot
from . import pair_memory
from .adjacent_slices import adjacent_slices
from .fx_support import CHUNK_OPERANDS, CHUNKS_PER_STEP, SPLITTERS, FakeValues, accumulation_ops, same_sizes, val

aten = torch.ops.aten
log = logging.getLogger(__name__)

NAME = "accumulate_pairs"  # counted as "accumulate_pairs:<event>"
RETIRED_BY = "none: an optimization across eager calls"


def cache_settings() -> tuple:
    """What the pass's output depends on besides its source and the graph (the FX graph
    cache keys on it): the budget's constants, the budget the environment sets, and the
    splitters registered."""
    return (pair_memory.FLOOR_BYTES, pair_memory.ACCUMULATOR_SHARE, PAIR_BUDGET.value(), tuple(sorted(SPLITTERS)))


def settings() -> str | None:
    """What the status shows beside "applied": the budget the environment sets, if any."""
    return PAIR_BUDGET.status()


def _count(what: str, n: int = 1) -> None:
    count(NAME, what, n)


def _plain_step(node: fx.Node) -> bool:
    """An ``addmm``/``addmm.dtype`` with ``beta = alpha = 1`` and 2-D operands."""
    if node.op != "call_function" or node.target not in accumulation_ops():
        return False
    if any(node.kwargs.get(k, 1) != 1 for k in ("beta", "alpha")) or set(node.kwargs) - {"beta", "alpha"}:
        return False
    args = node.args
    if len(args) != (4 if node.target is aten.addmm.dtype else 3):
        return False
    mat1, mat2 = args[1], args[2]
    return all(isinstance(val(m), torch.Tensor) and val(m).dim() == 2 for m in (mat1, mat2))


def _transposed(node: Any) -> fx.Node | None:
    """``g`` when ``node`` is ``permute(g, [1, 0])`` (or ``t(g)``/``transpose(g, 0, 1)``)."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return None
    if node.target is aten.permute.default and list(node.args[1]) == [1, 0]:
        return node.args[0]
    if node.target is aten.t.default:
        return node.args[0]
    if node.target is aten.transpose.int and sorted(node.args[1:3]) in ([0, 1], [-2, -1], [-1, 0], [0, -1]):
        return node.args[0]
    return None


def chains(graph: fx.Graph) -> list[list[fx.Node]]:
    """Chains of >= 2 plain steps, each step's ``self`` the previous one and that step's
    only user."""
    found = []
    for node in graph.nodes:
        if not _plain_step(node):
            continue
        prev = node.args[0]
        if isinstance(prev, fx.Node) and _plain_step(prev) and len(prev.users) == 1 and prev.target is node.target:
            continue  # not the first step
        chain = [node]
        while len(chain[-1].users) == 1:
            (nxt,) = chain[-1].users
            if not (_plain_step(nxt) and nxt.target is node.target and nxt.args[0] is chain[-1] and nxt.args[3:] == node.args[3:]):
                break
            chain.append(nxt)
        if len(chain) >= 2:
            found.append(chain)
    return found


def _rows(graph: fx.Graph, pieces: list[fx.Node], mode: Any) -> fx.Node:
    """The pieces stacked by rows: one slice where they are adjacent slices of one
    tensor (no copy), else a ``cat``."""
    adjacent = adjacent_slices(pieces)
    if adjacent is not None:
        base, start, end = adjacent
        node = graph.call_function(aten.slice.Tensor, (base, 0, start, end))
        with mode:
            node.meta["val"] = aten.slice.Tensor(val(base), 0, *(val(b) if isinstance(b, fx.Node) else b for b in (start, end)))
        return node
    node = graph.call_function(aten.cat.default, (list(pieces), 0))
    with mode:
        node.meta["val"] = aten.cat.default([val(p) for p in pieces], 0)
    return node


def pair_cost(first: fx.Node, second: fx.Node, split: bool = False) -> int:
    """Bytes a merged pair keeps alive beyond two separate steps: for each operand that is
    not one slice already, the first chunk waiting for the second, and (unless ``split``:
    each chunk read where it lies) the ``cat`` of both."""
    operands = ([_transposed(first.args[1]), _transposed(second.args[1])], [first.args[2], second.args[2]])
    return pair_memory.pair_cost(operands, split)


def splitter(first: fx.Node, second: fx.Node) -> Any:
    """The op of :data:`SPLITTERS` that takes this pair, or None."""
    for takes in SPLITTERS.values():
        op = takes(first, second)
        if op is not None:
            return op
    return None


def _merge(graph: fx.Graph, first: fx.Node, second: fx.Node) -> fx.Node | None:
    """One step for ``first`` and ``second`` (``second.args[0] is first``), or None."""
    g = [_transposed(s.args[1]) for s in (first, second)]
    x = [s.args[2] for s in (first, second)]
    if any(p is None or val(p) is None for p in g):
        return None
    gv, xv = [val(p) for p in g], [val(p) for p in x]
    if not (same_sizes(gv[0].shape[1:], gv[1].shape[1:]) and same_sizes(xv[0].shape[1:], xv[1].shape[1:])):
        return None
    if gv[0].dtype != gv[1].dtype or xv[0].dtype != xv[1].dtype:
        return None
    mode = FakeValues(first, second)
    with graph.inserting_before(second):
        g_cat = _rows(graph, g, mode)
        g_t = graph.call_function(aten.permute.default, (g_cat, [1, 0]))
        x_cat = _rows(graph, x, mode)
        merged = graph.call_function(second.target, (first.args[0], g_t, x_cat, *second.args[3:]))
        with mode:
            g_t.meta["val"] = aten.permute.default(g_cat.meta["val"], [1, 0])
            merged.meta["val"] = second.target(val(first.args[0]), g_t.meta["val"], x_cat.meta["val"], *second.args[3:])
    return _take_over(graph, first, second, merged, (merged, x_cat, g_t, g_cat), [[g[0]], [g[1]]])


def _chunk_operands(step: fx.Node, own: list) -> list:
    return step.meta.get(CHUNK_OPERANDS) or [own]


def _take_over(graph: fx.Graph, first: fx.Node, second: fx.Node, merged: fx.Node, made: tuple,
               operands: list) -> fx.Node | None:  # fmt: skip
    """``merged`` in place of ``first`` and ``second`` where its value has ``second``'s
    shape, strides and dtype; else None, the nodes ``made`` for it erased.  ``operands``:
    the nodes ``merged`` reads for each of the two steps (:data:`CHUNK_OPERANDS`)."""
    want, got = val(second), merged.meta["val"]
    if not (same_sizes(got.shape, want.shape) and same_sizes(got.stride(), want.stride()) and got.dtype == want.dtype):
        for n in made:
            if not n.users:
                graph.erase_node(n)
        return None
    for key, value in second.meta.items():
        if key != "val":
            merged.meta.setdefault(key, value)
    merged.meta[CHUNKS_PER_STEP] = first.meta.get(CHUNKS_PER_STEP, 1) + second.meta.get(CHUNKS_PER_STEP, 1)
    merged.meta[CHUNK_OPERANDS] = _chunk_operands(first, operands[0]) + _chunk_operands(second, operands[1])
    second.replace_all_uses_with(merged)
    graph.erase_node(second)
    graph.erase_node(first)
    return merged


def _merge_split(graph: fx.Graph, first: fx.Node, second: fx.Node, op: Any) -> fx.Node | None:
    """One ``op(acc, a, b, a2, b2)`` step for ``first`` and ``second``, or None."""
    mode = FakeValues(first, second)
    args = (first.args[0], first.args[1], first.args[2], second.args[1], second.args[2])
    with graph.inserting_before(second):
        merged = graph.call_function(op, args)
    with mode:
        merged.meta["val"] = op(*(val(a) for a in args))
    return _take_over(graph, first, second, merged, (merged,), [list(args[1:3]), list(args[3:5])])


def _how(chain: list[fx.Node]) -> tuple[str, list]:
    """How to merge the pairs of ``chain``: ("cat", []) where every pair's pieces are
    slices of one tensor (one step, no copy); else ("split", their ops) where an op of
    :data:`SPLITTERS` takes every pair within the budget; else ("cat", []) within the
    budget; else ("over_budget", [])."""
    pairs = list(zip(chain[0::2], chain[1::2]))
    costs = [pair_cost(a, b) for a, b in pairs]
    if max(costs) == 0:
        return "cat", []
    allowed = pair_memory.budget(chain)
    ops = [splitter(a, b) for a, b in pairs]
    if all(op is not None for op in ops) and max(pair_cost(a, b, split=True) for a, b in pairs) <= allowed:
        return "split", ops
    if max(costs) <= allowed:
        return "cat", []
    return "over_budget", []


def accumulate_in_pairs(graph: fx.Graph) -> int:
    """Merge each pair of consecutive steps of every accumulation chain.  Returns the
    number of pairs merged (0: graph untouched).  Never raises."""
    try:
        found = chains(graph)
    except Exception as error:  # an unexpected graph: leave it as it is
        _count("error")
        log.warning("accumulate_pairs: graph left as it was (%s: %s)", type(error).__name__, error)
        return 0
    merged = 0
    for chain in found:
        done = 0
        try:
            how, ops = _how(chain)
        except Exception as error:  # pragma: no cover - torch internals changed
            _count("error")
            log.warning("accumulate_pairs: chain left as it was (%s: %s)", type(error).__name__, error)
            continue
        if how == "over_budget":
            _count("over_budget")
            continue
        for i, (first, second) in enumerate(zip(chain[0::2], chain[1::2])):
            try:
                if how == "split":
                    done += _merge_split(graph, first, second, ops[i]) is not None
                else:
                    done += _merge(graph, first, second) is not None
            except Exception as error:  # pragma: no cover - torch internals changed
                _count("error")
                log.warning("accumulate_pairs: pair left as it was (%s: %s)", type(error).__name__, error)
        if done:
            _count("chains")
            _count("pairs", done)
            if how == "split":
                _count("split", done)
            merged += done
    return merged


def plan() -> list[Decision]:
    """Run :func:`accumulate_in_pairs` in the post-grad slot."""
    if not post_grad_slot.supported():
        raise Unavailable("no post_grad_custom_post_pass / CustomGraphPass in this torch")
    reason = (
        "a chunked accumulation reads and writes its whole accumulator once per chunk "
        "(memory-bound: 1.65 ms a chunk for Liger FLCE's fp32 gradient on an H200); "
        "two chunks' products per pass halve that traffic"
    )
    patch = post_grad_slot.register(NAME, accumulate_in_pairs)
    return [needed(patch.name, reason, [patch], probe=post_grad_slot.supported, obsolete_when=RETIRED_BY)]
