"""Prototype (issue 8): keep chunked-loss memory flat under Inductor.

Problem
-------
Liger's FusedLinearCrossEntropy (FLCE) loops over chunks of rows.  Eager reuses one
``logits_storage`` buffer: ``torch.mm(x_k, W.t(), out=logits_storage)``, the Triton CE
kernel overwrites it with dlogits, then ``mm(dlogits, W, out=grad_input[k])`` and
``addmm(grad_weight, dlogits.t(), x_k, out=grad_weight)`` read it.  Because the next chunk
writes the *same* storage, eager can never have two chunks' logits alive.

After AOTAutograd's functionalization that write-after-read edge is gone: every chunk's
``mm`` is a fresh tensor that depends only on graph inputs (x, W).  Nothing orders chunk
k+1's logits after chunk k's consumers, and three Inductor passes then move the consumers
away from the producers:

* ``reorder_for_locality`` (post-grad, inference graphs only; FLCE's forward runs under
  ``no_grad`` inside ``autograd.Function`` so it *is* an inference graph) pulls the
  accumulation chains (``addmm`` into grad_weight, ``slice_scatter`` into grad_input)
  towards the graph's end;
* the scheduler fuses the grad_input ``slice_scatter``/copy chain of all chunks into one
  kernel and its topological re-sort schedules every chunk's producers before it;
* ``reorder_for_peak_memory`` (lpmf / bfs / dfs) then hoists all logits ``mm`` to the top.

Each of these leaves all chunks' logits (``chunk x V`` each) alive until the deferred
``addmm`` / ``mm`` of that chunk runs: peak ~ BT x V x 2 bytes, i.e. the whole logits
matrix that chunking was meant to avoid.

Fix
---
A post-grad pass that restores the lost ordering edge explicitly, with Inductor's own
``control_deps`` HOP (``torch._inductor.fx_passes.control_dependencies``): it finds an
accumulation chain (``addmm``/``addmm.dtype`` whose ``self`` is the previous step, or a
``slice_scatter`` chain), maps every step back to the chunk's root matmul (the logits
``mm``: through views, ``getitem`` of ``triton_kernel_wrapper_functional`` and
``slice_scatter`` sources, and through the matmuls consuming the chunk), and makes root
k+1 depend on every *sink* of the work that depends on chunk k but not on chunk k+1
(the accumulation step, the grad_input write, the loss write).  The edges are
``WeakDep(is_fake=True)`` in the scheduler: they order nodes, respected by fusion
(a fusion that would create a cycle is refused), by the topological re-sort and by
``reorder_for_peak_memory``; they do not extend any buffer's lifetime.  The result is
eager's schedule: chunk k's logits buffer is freed (and reused) before chunk k+1's is
allocated.

``install()`` chains the pass into ``torch._inductor.config.post_grad_custom_post_pass``
(keeping any pass already there, and giving the FX graph cache a key); ``uninstall()``
puts the previous value back.  Compiled code already cached by Dynamo is not discarded.
"""

from __future__ import annotations

import hashlib
import operator
from typing import Any

import torch
import torch.fx as fx

__all__ = ["install", "uninstall", "is_installed", "serialize_chunks", "COUNTER"]

COUNTER = "flce_mem_fix"
aten = torch.ops.aten

_state: dict[str, Any] = {"installed": False, "previous": None}


def _matmuls():
    return {aten.mm.default, aten.mm.dtype}


def _chain_ops():
    return (aten.addmm.default, aten.addmm.dtype, aten.slice_scatter.default)


def _is_view(target) -> bool:
    if target is operator.getitem:
        return False
    return bool(getattr(target, "is_view", False)) or target in (
        aten.clone.default,
        aten.alias.default,
    )


def _tensor_val(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), torch.Tensor)


def _find_root(step: fx.Node) -> fx.Node | None:
    """The chunk's root matmul behind one step of a chain: the deepest ``mm`` reachable
    from the step's non-accumulator operands through views, Triton-kernel outputs,
    slice_scatter sources and consuming matmuls."""
    from torch._higher_order_ops.triton_kernel_wrap import triton_kernel_wrapper_functional

    matmuls = _matmuls()
    frontier = [(a, 0) for a in step.args[1:] if isinstance(a, fx.Node)]
    seen: set[fx.Node] = set()
    found: list[tuple[int, fx.Node]] = []
    while frontier:
        node, depth = frontier.pop()
        if node in seen or node.op != "call_function":
            continue
        seen.add(node)
        target = node.target
        if target in matmuls:
            found.append((depth, node))
            frontier += [(a, depth + 1) for a in node.args if isinstance(a, fx.Node)]
        elif target is operator.getitem and isinstance(node.args[0], fx.Node) and (
            node.args[0].target is triton_kernel_wrapper_functional
        ):
            source = node.args[0].kwargs["kwargs"].get(node.args[1])
            if isinstance(source, fx.Node):
                frontier.append((source, depth + 1))
        elif target is aten.slice_scatter.default:
            frontier.append((node.args[1], depth + 1))
        elif _is_view(target) and node.args and isinstance(node.args[0], fx.Node):
            frontier.append((node.args[0], depth + 1))
    if not found:
        return None
    deepest = max(d for d, _ in found)
    roots = {n for d, n in found if d == deepest}
    return roots.pop() if len(roots) == 1 else None


def _chains(graph: fx.Graph) -> list[list[fx.Node]]:
    ops = _chain_ops()
    chains = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target not in ops:
            continue
        prev = node.args[0]
        if isinstance(prev, fx.Node) and prev.target is node.target:
            continue  # not a chain start
        chain = [node]
        while True:
            nxt = [u for u in chain[-1].users if u.target is node.target and u.args[0] is chain[-1]]
            if len(nxt) != 1:
                break
            chain.append(nxt[0])
        if len(chain) >= 2:
            chains.append(chain)
    # addmm chains first (they read the whole chunk), then the longest
    chains.sort(key=lambda c: (c[0].target is aten.slice_scatter.default, -len(c)))
    return chains


def _descendants(node: fx.Node) -> set[fx.Node]:
    out, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in out:
            continue
        out.add(n)
        stack.extend(n.users)
    return out


def _ancestors(node: fx.Node) -> set[fx.Node]:
    out, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in out:
            continue
        out.add(n)
        stack.extend(n.all_input_nodes)
    return out


def _chunk_roots(graph: fx.Graph) -> list[fx.Node] | None:
    for chain in _chains(graph):
        roots = [_find_root(step) for step in chain]
        if any(r is None for r in roots) or len(set(roots)) != len(roots):
            continue
        return roots
    return None


def serialize_chunks(graph: fx.Graph) -> int:
    """Make chunk k+1's root matmul wait for chunk k's work; returns the edges added."""
    from torch._dynamo.utils import counters
    from torch._inductor.fx_passes.control_dependencies import preserve_node_ordering
    from torch.utils._ordered_set import OrderedSet

    roots = _chunk_roots(graph)
    if not roots:
        return 0
    desc = [_descendants(r) for r in roots]
    deps: dict[fx.Node, OrderedSet] = {}
    edges = 0
    for k in range(len(roots) - 1):
        work = desc[k] - desc[k + 1]
        nxt_ancestors = _ancestors(roots[k + 1])
        sinks = [
            n
            for n in work
            if n.op == "call_function"
            and _tensor_val(n)
            and not any(u in work for u in n.users)
            and n not in nxt_ancestors
        ]
        if sinks:
            order = {n: i for i, n in enumerate(graph.nodes)}
            deps[roots[k + 1]] = OrderedSet(sorted(sinks, key=order.__getitem__))
            edges += len(sinks)
    if deps:
        preserve_node_ordering(graph, deps)
        counters[COUNTER]["graphs"] += 1
        counters[COUNTER]["chunks"] += len(roots)
        counters[COUNTER]["edges"] += edges
    return edges


def _file_hash() -> str:
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _make_pass(previous):
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class SerializeChunks(CustomGraphPass):
        """post_grad_custom_post_pass: the previous pass (if any), then serialize_chunks."""

        def __init__(self, prev):
            self.prev = prev

        def __call__(self, graph: fx.Graph) -> None:
            if self.prev is not None:
                self.prev(graph)
            serialize_chunks(graph)

        def uuid(self):
            prev = None
            if self.prev is not None:
                prev = self.prev.uuid() if hasattr(self.prev, "uuid") else repr(self.prev)
            return ("flce_mem_fix", _file_hash(), prev)

    return SerializeChunks(previous)


def install() -> None:
    import torch._inductor.config as config

    if _state["installed"]:
        return
    _state["previous"] = config.post_grad_custom_post_pass
    config.post_grad_custom_post_pass = _make_pass(_state["previous"])
    _state["installed"] = True


def uninstall() -> None:
    import torch._inductor.config as config

    if not _state["installed"]:
        return
    config.post_grad_custom_post_pass = _state["previous"]
    _state.update(installed=False, previous=None)


def is_installed() -> bool:
    return _state["installed"]
