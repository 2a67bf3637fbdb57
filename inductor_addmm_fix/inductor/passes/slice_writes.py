"""Chunked writes into slices of one buffer stay slice-sized (a post-grad pass).

Liger's FusedLinearCrossEntropy (FLCE) writes each chunk's input gradient into its rows
of one buffer: ``torch.mm(g, W, out=grad_input[a:b])``.  Functionalization turns the
loop into a chain of ``slice_scatter`` ops, each taking the previous one's result::

    s1 = slice_scatter(zeros, mm_1, 0, 0, 256)
    s2 = slice_scatter(s1,    mm_2, 0, 256, 512)   # ... one per chunk

Inductor lowers every ``slice_scatter`` to a kernel over the *whole* buffer (it reuses
the buffer in place, but reads and writes all of it; seen in the CPU code of torch 2.13):
``chunks x BT x H`` elements of traffic where eager writes ``BT x H`` once.

When the written ranges are disjoint (they are: one chunk each), the pass below, run in
the post-grad slot (``post_grad_slot``), rewrites the chain in one of two ways:

* the first buffer is a graph input that the graph copies the result back into, and that
  nothing else reads (Liger's ``.item()`` breaks the graph, so ``grad_input`` comes from
  an earlier graph): each write becomes ``copy_`` into its slice of the input, and the
  whole-buffer copy back goes.  No buffer of the input's size is allocated or moved.
* otherwise, the chain's result becomes one ``aten.cat`` of the pieces written, in index
  order, with slices of the first buffer in the gaps.  Inductor lowers a ``cat`` of more
  than ``max_pointwise_cat_inputs`` pieces to a ``ConcatKernel``: each matmul writes
  straight into its slice of the output.  Shorter chains are left alone, since Inductor
  would fuse that ``cat`` into one kernel that keeps every piece alive until the end.

First, a slice that reads back exactly the rows a ``slice_scatter`` wrote reads the
written source instead (:func:`forward_read_backs`; counted ``slice_writes:reads``), so
that a buffer whose prefix each chunk reuses (Liger 0.8.5's logits buffer) is not copied
whole per chunk where the prefix has a symbolic length.

Only chains it can prove equal are rewritten: one dimension, step 1, each intermediate
result used by the next write only (dead views aside); for a ``cat``, static sizes and
bounds and pairwise disjoint ranges.  Writes into a graph input need neither: written in
the chain's order they leave the input as the chain would, whatever the bounds, so a
graph with symbolic sizes (automatic dynamic shapes after a new row count,
``dynamic=True``, ``mark_dynamic``) is rewritten as its static graph is.  Chains are planned one at a time on the graph as it then
is.  Anything else is left as it was, and the pass never raises.  Counted in
``torch._dynamo.utils.counters["inductor_addmm_fix"]``: ``slice_writes:chains``,
``slice_writes:in_place``, ``slice_writes:cat``, ``slice_writes:pieces`` (writes) and
``slice_writes:error``.

Upstream: none known (Inductor's re-inplacing makes each ``slice_scatter`` reuse the
buffer, not write only its slice).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import torch
import torch.fx as fx

from ...patching.counters import count
from ...patching.declare import Decision, Unavailable, needed
from . import post_grad_slot
from .fx_support import FakeValues
from .scatter_chains import (
    is_dead, is_scatter, is_static, live_users, read_back, scatter_chains, scatter_range, written_range,
)

aten = torch.ops.aten
log = logging.getLogger(__name__)

NAME = "slice_writes"  # counted as "slice_writes:<event>" in counters["inductor_addmm_fix"]
RETIRED_BY = (
    "none known: Inductor writes each slice_scatter over the whole buffer (its re-inplacing "
    "reuses the buffer, it does not write only the slice)"
)


def _count(what: str, n: int = 1) -> None:
    count(NAME, what, n)


def _erase_with_dead_users(graph: fx.Graph, node: fx.Node) -> None:
    for user in list(node.users):
        if is_dead(user):
            graph.erase_node(user)
    graph.erase_node(node)


@dataclasses.dataclass
class InPlace:
    """A chain whose result is copied back into a graph input: each write becomes a copy
    into its slice of ``base`` (``writes``: (start, end, write node)), the ``epilogue``
    (the copy back) goes."""

    base: fx.Node
    dim: int
    writes: list[tuple[Any, Any, fx.Node]]
    epilogue: fx.Node

    def apply(self, graph: fx.Graph, chain: list[fx.Node]) -> int:
        """Rewrite the graph; the number of pieces written."""
        _write_in_place(graph, chain, self.base, self.dim, self.writes, self.epilogue)
        _count("in_place")
        return len(self.writes)


@dataclasses.dataclass
class Concatenation:
    """A chain whose result becomes one ``cat`` of ``pieces`` along ``dim`` ((start, end,
    write node, or None for a piece of ``base`` that no write covers))."""

    base: fx.Node
    dim: int
    pieces: list[tuple[int, int, fx.Node | None]]

    def apply(self, graph: fx.Graph, chain: list[fx.Node]) -> int | None:
        """Rewrite the graph; the number of pieces written, or None where it is left as
        it is (too few pieces, or a ``cat`` whose value would differ)."""
        if len(self.pieces) < _min_pieces() or not _concatenate(graph, chain, self.base, self.dim, self.pieces):
            return None
        _count("cat")
        return sum(1 for piece in self.pieces if piece[2] is not None)


def plan_in_place(chain: list[fx.Node]) -> InPlace | None:
    """(base, dim, writes, epilogue) for a chain written into a graph input that the
    graph copies its result back into and that nothing else reads, else None.
    ``writes``: (start, end, write) in graph order; bounds may be symbolic.

    Writing each source into its slice of the input, in the chain's order, leaves the
    input as the chain's result would: every write is a slice of the same dimension
    with step 1, and no one reads the input or an intermediate state in between.  The
    bounds need no proof of order or disjointness (a later write wins, as in the
    chain), and ``aten.slice`` clamps them as ``slice_scatter`` does, so symbolic
    bounds (a loop over a symbolic row count) are rewritten as static ones are."""
    base = chain[0].args[0]
    val = base.meta.get("val") if isinstance(base, fx.Node) else None
    if not isinstance(val, torch.Tensor) or val.ndim == 0:
        return None
    dims, writes = set(), []
    for node in chain:
        dim, start, end, step = scatter_range(node)
        src = node.args[1]
        sval = src.meta.get("val") if isinstance(src, fx.Node) else None
        if not (is_static(dim) and step == 1 and isinstance(sval, torch.Tensor) and sval.dtype == val.dtype and sval.ndim == val.ndim):
            return None
        if not all(_bound(b) for b in (start, end)):
            return None
        dims.add(dim % val.ndim)
        writes.append((start, end, node))
    if len(dims) != 1:
        return None
    epilogue = copied_back_into(chain, base)
    if epilogue is None:
        return None
    return InPlace(base, dims.pop(), writes, epilogue)


def _bound(value: Any) -> bool:
    """A slice bound the rewrite can pass on: None, an int, or a node whose value is a
    backed integer (a symbolic size, not data read at run time)."""
    if value is None or is_static(value):
        return True
    if not isinstance(value, fx.Node):
        return False
    bound = value.meta.get("val")
    if type(bound) is int:
        return True
    if not isinstance(bound, torch.SymInt):
        return False
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return not free_unbacked_symbols(bound)


def plan_cat(chain: list[fx.Node]) -> Concatenation | None:
    """(base, dim, pieces) for a chain whose writes are provably a concatenation, else
    None.  ``pieces`` cover the dimension in order: (start, end, write) with ``write``
    the ``slice_scatter`` node whose source fills the range, or None for a gap, filled
    from ``base``."""
    base = chain[0].args[0]
    val = base.meta.get("val") if isinstance(base, fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    shape = tuple(val.shape)
    if not all(is_static(s) for s in shape):
        return None
    dims, writes = set(), []
    for node in chain:
        w = written_range(node, len(shape), shape.__getitem__)
        src = node.args[1]
        sval = src.meta.get("val") if isinstance(src, fx.Node) else None
        if w is None or not isinstance(sval, torch.Tensor) or sval.dtype != val.dtype:
            return None
        dim, start, end = w
        expected = shape[:dim] + (end - start,) + shape[dim + 1 :]
        if tuple(sval.shape) != expected:
            return None
        dims.add(dim)
        if end > start:
            writes.append((start, end, node))
    if len(dims) != 1 or not writes:
        return None
    (dim,) = dims
    writes.sort(key=lambda w: w[0])
    if any(a[1] > b[0] for a, b in zip(writes, writes[1:])):
        return None  # overlapping writes: the later one wins; not a plain concatenation
    pieces, at = [], 0
    for start, end, node in writes:
        if start > at:
            pieces.append((at, start, None))
        pieces.append((start, end, node))
        at = end
    if at < shape[dim]:
        pieces.append((at, shape[dim], None))
    return Concatenation(base, dim, pieces)


def _min_pieces() -> int:
    """Inductor fuses a ``cat`` of at most this many inputs into one pointwise kernel
    (every piece alive until it runs); above it each piece is written into place."""
    import torch._inductor.config as config

    return int(getattr(config, "max_pointwise_cat_inputs", 8)) + 1


def copied_back_into(chain: list[fx.Node], base: Any) -> fx.Node | None:
    """The ``copy_(base, result)`` that puts the chain's result back into ``base``, when
    ``base`` is a graph input that nothing else reads (functionalization's epilogue for
    ``out=`` slices of an input); else None."""
    if not (isinstance(base, fx.Node) and base.op == "placeholder"):
        return None
    users = set(live_users(base))
    copies = [u for u in users if u.target is aten.copy_.default and u.args[0] is base and u.args[1] is chain[-1]]
    if len(copies) != 1 or users != {chain[0], copies[0]}:
        return None
    return copies[0]


def forward_read_backs(graph: fx.Graph) -> int:
    """Every slice that reads back what a ``slice_scatter`` just wrote reads the written
    source instead; the scatters nothing reads any more go.  Returns the reads
    forwarded.  Liger 0.8.5 writes each chunk's logits into a prefix of one buffer,
    ``mm(x_k, W.t(), out=storage[:n_k])``, and reads that prefix back: where ``n_k`` is
    symbolic the prefix is not provably the whole buffer, and Inductor materialized a
    copy of the whole buffer per chunk for the read."""
    forwarded = 0
    for node in list(graph.nodes):
        src = read_back(node)
        if src is None:
            continue
        scatter = node.args[0]
        node.replace_all_uses_with(src)
        graph.erase_node(node)
        forwarded += 1
        while is_scatter(scatter) and not scatter.users:  # a chain of versions nobody reads
            before = scatter.args[0]
            graph.erase_node(scatter)
            scatter = before
    return forwarded


def rewrite_slice_writes(graph: fx.Graph) -> int:
    """Rewrite each provable chain of slice writes: into the graph input it is copied
    back into, in place, or else as one ``cat``.  Returns the number of chains
    rewritten (0: graph untouched).  Never raises.

    Chains are planned one at a time on the graph as it is then: a rewrite may change
    what a later chain starts from (a chain continuing another one's result)."""
    done = 0
    try:
        reads = forward_read_backs(graph)
    except Exception as error:  # pragma: no cover - an unexpected graph: leave it
        _count("error")
        log.warning("slice_writes: reads left as they were (%s: %s)", type(error).__name__, error)
        reads = 0
    if reads:
        _count("reads", reads)
    tried: set[fx.Node] = set()
    while True:
        try:
            found = None
            for chain in scatter_chains(graph):
                if chain[-1] in tried:
                    continue
                tried.add(chain[-1])
                in_place = plan_in_place(chain)
                if in_place is not None:
                    found = chain, in_place
                    break
                plan = plan_cat(chain)
                if plan is not None:
                    found = chain, plan
                    break
        except Exception as error:  # an unexpected graph: leave the rest as it is
            _count("error")
            log.warning("slice_writes: graph left as it was (%s: %s)", type(error).__name__, error)
            return done
        if found is None:
            return done
        chain, plan = found
        try:
            written = plan.apply(graph, chain)
            if written is None:
                continue
        except Exception as error:  # pragma: no cover - torch internals changed
            _count("error")
            log.warning("slice_writes: chain left as it was (%s: %s)", type(error).__name__, error)
            continue
        done += 1
        _count("chains")
        _count("pieces", written)


def _write_in_place(graph: fx.Graph, chain: list[fx.Node], base: fx.Node, dim: int, writes: list, epilogue: fx.Node) -> None:
    """Each write becomes ``copy_`` into its slice of the graph input, where the write
    was; readers of the result read the input (now written); the epilogue goes.  New
    nodes get their fake values before the graph changes."""
    with FakeValues(base):
        planned = [
            (node, start, end, aten.slice.Tensor(base.meta["val"], dim, _value(start), _value(end)))
            for start, end, node in writes
        ]
    for node, start, end, val in planned:
        with graph.inserting_before(node):
            view = graph.call_function(aten.slice.Tensor, (base, dim, start, end))
            view.meta.update({k: v for k, v in node.meta.items() if k != "val"}, val=val)
            write = graph.call_function(aten.copy_.default, (view, node.args[1]))
            write.meta.update({k: v for k, v in node.meta.items() if k != "val"}, val=val)
    epilogue.replace_all_uses_with(base)
    graph.erase_node(epilogue)
    chain[-1].replace_all_uses_with(base)
    for node in reversed(chain):
        _erase_with_dead_users(graph, node)


def _value(bound: Any) -> Any:
    """A slice bound as the fake tensors see it (a node's value; None and ints as they are)."""
    return bound.meta["val"] if isinstance(bound, fx.Node) else bound


def _concatenate(graph: fx.Graph, chain: list[fx.Node], base: fx.Node, dim: int, pieces: list) -> bool:
    """The chain's result becomes one ``cat`` of its pieces.  The cat is built (with fake
    values) first and used only if its value has the chain result's shape and strides;
    otherwise (or on a failure) the new nodes are removed and the graph is as it was."""
    last = chain[-1]
    mode = FakeValues(last)
    created: list[fx.Node] = []
    try:
        inputs = []
        with graph.inserting_before(last):
            for start, end, write in pieces:
                if write is not None:
                    inputs.append(write.args[1])
                    continue
                gap = graph.call_function(aten.slice.Tensor, (base, dim, start, end))
                created.append(gap)
                with mode:
                    gap.meta["val"] = aten.slice.Tensor(base.meta["val"], dim, start, end)
                inputs.append(gap)
            cat = graph.call_function(aten.cat.default, (inputs, dim))
            created.append(cat)
            with mode:
                cat.meta["val"] = aten.cat.default([n.meta["val"] for n in inputs], dim)
        same = cat.meta["val"].shape == last.meta["val"].shape and cat.meta["val"].stride() == last.meta["val"].stride()
    except Exception as error:
        failure: Exception | None = error
        same = False
    else:
        failure = None
    if not same:
        for node in reversed(created):
            graph.erase_node(node)
        if failure is not None:
            raise failure
        return False
    for key, value in last.meta.items():
        if key != "val":
            cat.meta.setdefault(key, value)
    last.replace_all_uses_with(cat)
    for node in reversed(chain):
        _erase_with_dead_users(graph, node)
    return True


def plan() -> list[Decision]:
    """Run :func:`rewrite_slice_writes` in the post-grad slot."""
    if not post_grad_slot.supported():
        raise Unavailable("no post_grad_custom_post_pass / CustomGraphPass in this torch")
    reason = (
        "chunked loops (FLCE) write each chunk's slice of one buffer with a kernel over the whole "
        "buffer; rewritten as one cat, or in place into a graph input: slice-sized writes"
    )
    patch = post_grad_slot.register(NAME, rewrite_slice_writes)
    return [needed(patch.name, reason, [patch], probe=post_grad_slot.supported, obsolete_when=RETIRED_BY)]
