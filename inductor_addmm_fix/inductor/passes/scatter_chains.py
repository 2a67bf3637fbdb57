"""Chains of ``slice_scatter`` in a post-grad graph, read as ``slice_writes`` needs them:
which rows a write covers, which nodes are dead views, the maximal chains of writes each
feeding only the next, and a slice that reads back exactly the rows a write wrote.
Reading only: the rewrites are ``slice_writes``'.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from .fx_support import same_sizes

aten = torch.ops.aten


def is_scatter(node: Any) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target is aten.slice_scatter.default


def argument(node: fx.Node, i: int, name: str, default: Any) -> Any:
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def scatter_range(node: fx.Node, first: int = 2) -> tuple:
    """(dim, start, end, step) of a ``slice_scatter`` (its range's arguments start at
    position 2) or a ``slice`` (``first=1``), defaults filled in as the op reads them."""
    names = (("dim", 0), ("start", None), ("end", None), ("step", 1))
    return tuple(argument(node, first + i, name, default) for i, (name, default) in enumerate(names))


def is_static(value: Any) -> bool:
    return type(value) is int


def written_range(node: fx.Node, ndim: int, size_at: Any) -> tuple[int, int, int] | None:
    """(dim, start, end) that ``node`` writes, normalized as slicing does; None when
    symbolic or with a step other than 1."""
    dim, start, end, step = scatter_range(node)
    if not (is_static(dim) and step == 1 and (start is None or is_static(start)) and (end is None or is_static(end))):
        return None
    dim = dim % ndim if ndim else 0
    size = size_at(dim)
    if not is_static(size):
        return None
    start = 0 if start is None else start
    end = size if end is None else end
    start = max(0, min(size, start + size if start < 0 else start))
    end = max(start, min(size, end + size if end < 0 else end))
    return dim, start, end


def is_dead(node: fx.Node) -> bool:
    """A node nothing reads and that has no side effect (functionalization leaves such
    views behind, e.g. the slice an ``out=`` wrote through)."""
    return not node.users and node.op == "call_function" and not node.is_impure()


def live_users(node: fx.Node) -> list[fx.Node]:
    return [u for u in node.users if not is_dead(u)]


def scatter_chains(graph: fx.Graph) -> list[list[fx.Node]]:
    """Maximal chains ``[s_1, ..., s_n]`` (n >= 2) of ``slice_scatter`` nodes, each
    ``s_k``'s input ``s_{k-1}`` and ``s_{k-1}``'s only live user."""
    chains = []
    for node in graph.nodes:
        if not is_scatter(node):
            continue
        users = live_users(node)
        if len(users) == 1 and is_scatter(users[0]) and users[0].args[0] is node:
            continue  # not the last write
        chain = [node]
        while is_scatter(chain[-1].args[0]) and len(live_users(chain[-1].args[0])) == 1:
            chain.append(chain[-1].args[0])
        if len(chain) >= 2:
            chains.append(chain[::-1])
    return chains


def same_bound(a: Any, b: Any, default: Any) -> bool:
    """Two slice bounds that are the same value: the same node or int (None read as
    ``default``), or nodes whose symbolic values are one expression."""
    a, b = (default if x is None else x for x in (a, b))
    if a is b or (type(a) is int and type(b) is int and a == b):
        return True
    va, vb = (x.meta.get("val") if isinstance(x, fx.Node) else x for x in (a, b))
    if isinstance(va, torch.SymInt) and isinstance(vb, torch.SymInt):
        return va.node.expr == vb.node.expr
    return False


def read_back(node: Any) -> Any:
    """The source that ``node`` reads back unchanged, when ``node`` is
    ``slice(slice_scatter(base, src, dim, a, b), dim, a, b)`` (step 1 both): the rows it
    selects are exactly those ``src`` wrote.  None unless the slice has ``src``'s shape
    and strides (a user may read them)."""
    if not (isinstance(node, fx.Node) and node.op == "call_function" and node.target is aten.slice.Tensor):
        return None
    scatter = node.args[0]
    if not is_scatter(scatter):
        return None
    sdim, sstart, send, sstep = scatter_range(scatter)
    dim, start, end, step = scatter_range(node, first=1)
    if not (sstep == 1 and step == 1 and is_static(sdim) and is_static(dim) and sdim == dim):
        return None
    if not (same_bound(start, sstart, 0) and same_bound(end, send, None) and (end is not None or send is None)):
        return None
    src = scatter.args[1]
    val, sval = node.meta.get("val"), src.meta.get("val") if isinstance(src, fx.Node) else None
    if not (isinstance(val, torch.Tensor) and isinstance(sval, torch.Tensor) and val.dtype == sval.dtype):
        return None
    if not (same_sizes(val.shape, sval.shape) and same_sizes(val.stride(), sval.stride())):
        return None
    return src
