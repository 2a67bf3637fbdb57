"""Generic probes of the installed torch, shared by the patch modules.

Every patch is gated on a probe of behaviour or signature, never on a version number
alone.  The probes here know no patch: what an op is called, whether a function takes
a parameter, whether a config option is per thread, whether a table entry is the one
registered for a whole op packet.  Probes never raise: one that cannot answer says so
(``None``), and the caller decides what that means.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from typing import Any, Callable, Iterator


def aten_op(qualname: str) -> Any:
    """``torch.ops.aten.addmm.dtype`` for ``"addmm.dtype"`` (``"addmm"``: the default overload)."""
    import torch

    name, _, overload = qualname.partition(".")
    return getattr(getattr(torch.ops.aten, name), overload or "default")


def takes_parameter(fn: Callable[..., Any], parameter: str) -> bool | None:
    """Whether ``fn`` (seen through functools.wraps) has a parameter of that name."""
    try:
        return parameter in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None


def is_packet_wide(table: dict, name: str, overload: str = "dtype") -> bool:
    """Whether ``table`` maps ``aten.<name>.<overload>`` to the very object registered
    for ``aten.<name>.default``: one entry for the whole packet, which knows nothing of
    what is special about that overload."""
    entry = table.get(aten_op(f"{name}.{overload}"))
    return entry is not None and entry is table.get(aten_op(name))


def config_is_per_thread(module: Any, name: str) -> bool:
    """Whether assigning ``module.name`` sets it for the calling thread only (torch
    2.13+: the entry keeps user assignments in a ``ContextVar``)."""
    try:
        entry = module._config[name]
        from torch.utils._config_module import _UNSET_SENTINEL  # noqa: F401  (needed to restore)
    except Exception:
        return False
    return isinstance(getattr(entry, "user_override", None), contextvars.ContextVar) and hasattr(entry, "default")


def hash_of_files(paths: tuple[str, ...]) -> bytes:
    """A hash of the files' contents, with Inductor's ``get_hash_for_files`` where this
    torch has it (the helper ``CustomGraphPass.uuid()`` is meant to use)."""
    try:
        from torch._inductor.custom_graph_pass import get_hash_for_files
    except ImportError:  # pragma: no cover - every torch we know has it
        import hashlib

        digest = hashlib.sha256()
        for path in paths:
            with open(path, "rb") as f:
                digest.update(f.read())
        return digest.digest()
    return get_hash_for_files(tuple(paths))


class ProbeError(RuntimeError):
    """A probe could not run at all (as opposed to finding torch broken)."""


@contextlib.contextmanager
def inductor_lowering(fn: Callable[..., Any], *shapes: tuple[int, ...]) -> Iterator[Any]:
    """Lower ``fn`` (traced on fp32 CPU inputs of these shapes) with Inductor's
    ``GraphLowering``, no code generated, and yield the graph with its handlers still
    set, so that a probe can look at what the lowering made or lower more into it.
    Milliseconds.  It may run inside a compile (the first one imports Inductor), so it
    leaves Dynamo's tracing context aside.  :class:`ProbeError` if the graph cannot be
    traced or set up; what the lowering itself raises propagates."""
    import torch
    from torch._guards import tracing
    from torch._inductor.virtualized import V

    with tracing(None):
        try:
            from torch._inductor.graph import GraphLowering
            from torch.fx.experimental.proxy_tensor import make_fx

            gm = make_fx(fn, tracing_mode="fake")(*[torch.empty(shape) for shape in shapes])
            inputs = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
            fake_mode = inputs[0].fake_mode
            graph = GraphLowering(gm, example_inputs=inputs)
        except Exception as error:
            raise ProbeError(f"cannot set up a graph to lower ({type(error).__name__}: {error})") from error
        with V.set_fake_mode(fake_mode), V.set_graph_handler(graph):
            graph.run(*inputs)
            yield graph


def global_names(fn: Any) -> tuple[str, ...]:
    """The global names ``fn``'s code refers to, nested code (comprehensions, inner
    functions) included: whether torch calls a function through a module attribute
    that a patch can replace."""
    code = getattr(fn, "__code__", None)
    names: list[str] = []
    stack = [code] if code is not None else []
    while stack:
        current = stack.pop()
        names += current.co_names
        stack += [c for c in current.co_consts if hasattr(c, "co_names")]
    return tuple(names)
