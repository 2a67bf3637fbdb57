"""Chunked accumulation loops keep their chunk order (a post-grad pass).

Liger's FusedLinearCrossEntropy (FLCE) loops over chunks of rows.  Eager reuses one
logits buffer: ``mm(x_k, W.t(), out=logits)``, a kernel overwrites it with dlogits, then
``mm(dlogits, W, out=grad_input[k])`` and ``addmm(grad_weight, dlogits.t(), x_k,
out=grad_weight)`` read it.  The next chunk writes the same buffer, so eager never holds
two chunks' logits.

After functionalization that write-after-read edge is gone: every chunk's logits ``mm``
depends only on graph inputs, and Inductor's ``reorder_for_locality``, the scheduler's
fusions and ``reorder_for_peak_memory`` move all of them ahead of the chunks' consumers.
Every chunk's logits (``chunk x V``) is then alive at once: the whole logits matrix that
chunking was meant to avoid, and compiled memory grows with the number of chunks.

The pass below, run in the post-grad slot (``post_grad_slot``) after ``slice_writes``,
puts the edge back with Inductor's own ``control_deps`` HOP
(``torch._inductor.fx_passes.control_dependencies.preserve_node_ordering``, torch 2.10+).
It acts only on graphs with the chunked-accumulation pattern:

* a chain of at least two ``addmm`` (or ``addmm.dtype``) steps, each step's ``self`` the
  previous step (the functional form of ``addmm(acc, ..., out=acc)``);
* for each step, its chunk's *root*: the largest matmul (``mm``/``addmm``, ``.default``
  or ``.dtype``) among the nodes that the step's operands need and no earlier step
  needed (the chunk's logits ``mm``); a step that accumulates ``k`` chunks
  (``accumulate_pairs``) has the ``k`` largest; the roots must be distinct.

Root k+1 then waits for every *sink* of chunk k's work (the nodes that depend on root k
but not on root k+1, and whose users are outside that work: the accumulation step, the
grad_input write, the loss write).  In the scheduler these are fake weak dependencies:
they order nodes, and fusion, the topological re-sort and ``reorder_for_peak_memory``
respect them; no buffer lives longer and no value changes.  A graph without the pattern,
or one where the edges would form a cycle, is left untouched, and the pass never raises.

What it did is counted in ``torch._dynamo.utils.counters["inductor_addmm_fix"]``:
``chunk_order:graphs``, ``chunk_order:chunks``, ``chunk_order:edges``,
``chunk_order:declined:<why>`` (a graph with an accumulation chain left as it was, see
:func:`plan_edges`), and ``chunk_order:error`` (an unexpected failure, the graph left as
it was).

Upstream: none known (Inductor has no notion of a reused out= buffer's ordering).
"""

from __future__ import annotations

import logging

import torch
import torch.fx as fx

from ...patching.counters import count
from ...patching.declare import Decision, Unavailable, needed
from . import post_grad_slot
from .fx_support import CHUNK_OPERANDS, CHUNKS_PER_STEP, accumulation_ops

aten = torch.ops.aten
log = logging.getLogger(__name__)

NAME = "chunk_order"  # counted as "chunk_order:<event>" in counters["inductor_addmm_fix"]
RETIRED_BY = (
    "none known: functionalized graphs keep no order between chunks that reuse one out= buffer"
)


def _count(what: str, n: int = 1) -> None:
    count(NAME, what, n)


def _matmuls() -> tuple:
    return (aten.mm.default, aten.mm.dtype, aten.addmm.default, aten.addmm.dtype)


def _tensor_val(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), torch.Tensor)


def _numel(node: fx.Node) -> int:
    """The node's number of elements, to rank matmuls by size: a symbolic one by its hint
    (the example's value), which reads no guard.  ``int()`` of a SymInt would guard on it
    and recompile the graph for every other size.  0 when unknown."""
    try:
        numel = node.meta["val"].numel()
    except Exception:
        return 0
    if isinstance(numel, torch.SymInt):
        hint = getattr(numel.node, "hint", None)
        return int(hint) if hint is not None else 0
    return int(numel)


def _closure(start, step) -> set[fx.Node]:
    out: set[fx.Node] = set()
    stack = list(start)
    while stack:
        n = stack.pop()
        if n in out:
            continue
        out.add(n)
        stack.extend(step(n))
    return out


def _ancestors(nodes) -> set[fx.Node]:
    return _closure(nodes, lambda n: n.all_input_nodes)


def _descendants(node: fx.Node) -> set[fx.Node]:
    return _closure([node], lambda n: n.users)


def _is_step(node) -> bool:
    """An accumulation step: ``addmm``/``addmm.dtype``, or a step that ``accumulate_pairs``
    made of several (``node.meta[CHUNKS_PER_STEP]``, whatever its op)."""
    return (isinstance(node, fx.Node) and node.op == "call_function" and bool(node.args)
            and (node.target in accumulation_ops() or CHUNKS_PER_STEP in node.meta))


def accumulation_chains(graph: fx.Graph) -> list[list[fx.Node]]:
    """Chains of >= 2 accumulation steps, each one's ``self`` the previous one (and the
    previous one's only such user), longest first."""
    chains = []
    for node in graph.nodes:
        if not _is_step(node):
            continue
        if _is_step(node.args[0]):
            continue  # not the first step
        chain = [node]
        while True:
            nxt = [u for u in chain[-1].users if _is_step(u) and u.args[0] is chain[-1]]
            if len(nxt) != 1:
                break
            chain.append(nxt[0])
        if len(chain) >= 2:
            chains.append(chain)
    chains.sort(key=lambda c: -len(c))
    return chains


def _chunk_operands(step: fx.Node, alive: set) -> list[list[fx.Node]]:
    """The operands of each chunk a step accumulates: ``node.meta[CHUNK_OPERANDS]`` on a
    merged step whose recorded operands are all still in the graph, else one group of all
    its operands (``args[1:]``)."""
    groups = step.meta.get(CHUNK_OPERANDS)
    if groups and all(n in alive for group in groups for n in group):
        return groups
    return [[a for a in step.args[1:] if isinstance(a, fx.Node)]]


def chunk_roots(chain: list[fx.Node]) -> list[fx.Node] | None:
    """The chunks' root matmuls, in chunk order: for each chunk, the largest matmul among
    the nodes that its operands need and no earlier chunk needed (earliest on ties).  A
    step that ``accumulate_pairs`` merged has each chunk's operands recorded
    (``node.meta[CHUNK_OPERANDS]``): each chunk gets its own root even where a chunk has
    several matmuls of one size (JSD's student and teacher logits); without the record,
    the ``k`` largest of the step's (``node.meta[CHUNKS_PER_STEP]``).  None if a chunk has
    none or two chunks share one."""
    graph = chain[0].graph
    order = {n: i for i, n in enumerate(graph.nodes)}
    matmuls = _matmuls()
    seen: set[fx.Node] = set()
    roots: list[fx.Node] = []
    for step in chain:
        groups = _chunk_operands(step, order.keys())
        per_group = 1 if len(groups) > 1 else step.meta.get(CHUNKS_PER_STEP, 1)
        for group in groups:
            needed = _ancestors(group)
            new = needed - seen
            seen |= needed
            own = [n for n in new if n.op == "call_function" and n.target in matmuls and _tensor_val(n)]
            if not own:
                log.debug("chunk_order: step %s (%d operand groups, recorded: %s): a chunk without a matmul of its own",
                          step.name, len(groups), CHUNK_OPERANDS in step.meta)
                return None
            largest = sorted(own, key=lambda n: (-_numel(n), order[n]))[:per_group]
            roots += sorted(largest, key=order.__getitem__)
    if len(set(roots)) != len(roots):
        log.debug("chunk_order: chunks share a root: %s", [r.name for r in roots])
        return None
    return roots


def ordering_edges(graph: fx.Graph, roots: list[fx.Node]) -> dict[fx.Node, list[fx.Node]]:
    """root k+1 -> the sinks of chunk k's work, in graph order."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    desc = [_descendants(r) for r in roots]
    deps: dict[fx.Node, list[fx.Node]] = {}
    for k in range(len(roots) - 1):
        work = desc[k] - desc[k + 1]
        before_next = _ancestors([roots[k + 1]])
        sinks = [
            n
            for n in work
            if n.op == "call_function"
            and _tensor_val(n)
            and n not in before_next
            and not any(u in work for u in n.users)
        ]
        if sinks:
            deps[roots[k + 1]] = sorted(sinks, key=order.__getitem__)
    return deps


def _acyclic_with(graph: fx.Graph, deps: dict[fx.Node, list[fx.Node]]) -> bool:
    """Whether the graph stays acyclic once every ``deps`` edge is added (Kahn)."""
    preds = {n: set(n.all_input_nodes) for n in graph.nodes}
    for node, extra in deps.items():
        preds[node] |= set(extra)
    succs: dict[fx.Node, list[fx.Node]] = {n: [] for n in graph.nodes}
    for n, ps in preds.items():
        for p in ps:
            succs.setdefault(p, []).append(n)
    indegree = {n: len(ps) for n, ps in preds.items()}
    ready = [n for n, d in indegree.items() if d == 0]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for s in succs.get(n, ()):
            indegree[s] -= 1
            if indegree[s] == 0:
                ready.append(s)
    return done == len(preds)


def plan_edges(graph: fx.Graph) -> tuple[list[fx.Node], dict[fx.Node, list[fx.Node]]] | None:
    """The chunk roots and the ordering edges this pass would add, or None (no pattern).
    Reads the graph only.  Where a graph has an accumulation chain and no chain gets
    edges, counts why the longest was declined: ``declined:roots`` (no distinct root
    matmul per chunk), ``declined:no_edges`` (no chunk's work ends before the next root),
    ``declined:cycle`` (the edges would form a cycle)."""
    declined = None
    for chain in accumulation_chains(graph):
        roots = chunk_roots(chain)
        if roots is None:
            declined = declined or ("roots", chain, None)
            continue
        deps = ordering_edges(graph, roots)
        if deps and _acyclic_with(graph, deps):
            return roots, deps
        declined = declined or ("cycle" if deps else "no_edges", chain, roots)
    if declined is not None:
        why, chain, roots = declined
        _count(f"declined:{why}")
        log.debug("chunk_order: a chain of %d steps (%s) declined (%s); roots: %s", len(chain),
                  ", ".join(sorted({str(s.target) for s in chain})), why,
                  None if roots is None else [f"{r.name}:{r.target}" for r in roots])
    return None


def serialize_chunks(graph: fx.Graph) -> int:
    """Make chunk k+1's root matmul wait for chunk k's work.  Returns the number of edges
    added (0: graph untouched).  Never raises."""
    try:
        planned = plan_edges(graph)
    except Exception as error:  # an unexpected graph: leave it as it is
        _count("error")
        log.warning("chunk_order: graph left as it was (%s: %s)", type(error).__name__, error)
        return 0
    if planned is None:
        return 0
    roots, deps = planned
    try:
        from torch._inductor.fx_passes.control_dependencies import preserve_node_ordering
        from torch._inductor.pattern_matcher import stable_topological_sort
        from torch.utils._ordered_set import OrderedSet

        preserve_node_ordering(graph, {root: OrderedSet(sinks) for root, sinks in deps.items()})
        # control_deps(root) now reads sinks placed after it; put producers first.
        stable_topological_sort(graph)
    except Exception as error:  # pragma: no cover - torch internals changed
        # Each replacement is complete or not made; an ordering edge changes no value.
        _count("error")
        log.warning("chunk_order: ordering edges not (all) added (%s: %s)", type(error).__name__, error)
        return 0
    edges = sum(len(s) for s in deps.values())
    _count("graphs")
    _count("chunks", len(roots))
    _count("edges", edges)
    return edges


def supported() -> bool:
    """Whether this torch has what :func:`serialize_chunks` needs:
    ``preserve_node_ordering`` and a lowering of ``control_deps`` (torch 2.10+).  The
    slot it runs in is probed by ``post_grad_slot.supported``."""
    try:
        from torch._inductor import lowering as L
        from torch._inductor.fx_passes.control_dependencies import control_deps, preserve_node_ordering
        from torch._inductor.pattern_matcher import stable_topological_sort  # noqa: F401
        from torch.utils._ordered_set import OrderedSet  # noqa: F401

        return callable(preserve_node_ordering) and control_deps in L.lowerings
    except Exception:
        return False


def plan() -> list[Decision]:
    """Run :func:`serialize_chunks` in the post-grad slot."""
    if not post_grad_slot.supported():
        raise Unavailable("no post_grad_custom_post_pass / CustomGraphPass in this torch")
    if not supported():
        raise Unavailable("needs preserve_node_ordering and a control_deps lowering (torch 2.10+)")
    reason = (
        "chunks of an accumulation loop lose their order in functionalization and Inductor hoists "
        "every chunk's logits matmul, all chunks' logits alive at once; control_deps restore the order"
    )
    patch = post_grad_slot.register(NAME, serialize_chunks)
    return [needed(patch.name, reason, [patch], probe=supported, obsolete_when=RETIRED_BY)]
