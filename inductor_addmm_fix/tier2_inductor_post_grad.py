"""The plugin's post-grad graph passes, in ``torch._inductor.config.post_grad_custom_post_pass``.

Inductor has one slot for a custom pass after its own post-grad passes.  The plugin puts
there a pass that runs what the user (or another library) had put there first, then its
own passes, in this order:

* Tier 2f, ``tier2_inductor_slice_writes.rewrite_slice_writes``: chunked writes into
  slices of one buffer become slice-sized (in place into a graph input, or one ``cat``);
* Tier 2e, ``tier2_inductor_chunk_order.serialize_chunks`` (torch 2.10+): chunk k+1's
  logits matmul waits for chunk k's work.  It runs after 2f so that it sees the
  rewritten writes.

Both run before Inductor's re-inplacing and lowering.  The previous value stays
reachable as ``.previous``, so that uninstalling puts the same object back.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any, Callable

import torch.fx as fx

from . import tier2_inductor_chunk_order as t2o
from . import tier2_inductor_slice_writes as t2f


def plugin_passes() -> tuple[tuple[str, Callable[[fx.Graph], int]], ...]:
    """The plugin's passes this torch supports, in the order they run."""
    passes: list[tuple[str, Callable[[fx.Graph], int]]] = [("slice_writes", t2f.rewrite_slice_writes)]
    if t2o.supported():
        passes.append(("chunk_order", t2o.serialize_chunks))
    return tuple(passes)


@functools.cache
def _source_hash() -> str:
    h = hashlib.sha256()
    for module in (__file__, t2f.__file__, t2o.__file__):
        with open(module, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _previous_passes(previous: Any) -> tuple:
    if previous is None:
        return ()
    if isinstance(previous, (list, tuple)):
        return tuple(previous)
    return (previous,)


def _pass_uuid(p: Any) -> Any:
    uuid = getattr(p, "uuid", None)
    return uuid() if callable(uuid) else None


def make_chained_pass(previous: Any) -> Any:
    """The value for ``post_grad_custom_post_pass``: runs ``previous`` (None, a pass, or a
    list/tuple of them, as torch accepts), then :func:`plugin_passes`."""
    from torch._inductor import custom_graph_pass as cgp

    inference_aware = getattr(cgp, "CustomInferenceAwareGraphPass", None)
    base = inference_aware or cgp.CustomGraphPass
    ours = plugin_passes()

    class PostGradPasses(base):  # type: ignore[misc, valid-type]
        """inductor_addmm_fix: the user's post-grad passes, then the plugin's (Tiers 2f, 2e)."""

        inductor_addmm_fix_chained = True
        passes = tuple(name for name, _ in ours)

        def __init__(self, previous):
            self.previous = previous

        def __call__(self, graph: fx.Graph, is_inference: bool = False) -> None:
            for p in _previous_passes(self.previous):
                if inference_aware is not None and isinstance(p, inference_aware):
                    p(graph, is_inference=is_inference)
                else:
                    p(graph)
            for _, run in ours:
                run(graph)  # each one never raises

        def uuid(self) -> Any:
            """None (the FX graph cache bypasses) if a previous pass has no uuid, as
            stock Inductor does for that pass alone."""
            prev = tuple(_pass_uuid(p) for p in _previous_passes(self.previous))
            if any(u is None for u in prev):
                return None
            return ("inductor_addmm_fix.post_grad", self.passes, _source_hash(), prev)

        def __repr__(self) -> str:
            return f"PostGradPasses({', '.join(self.passes)}; previous={self.previous!r})"

    return PostGradPasses(previous)


def is_chained_pass(value: Any) -> bool:
    return bool(getattr(value, "inductor_addmm_fix_chained", False))


def supported() -> bool:
    """Whether this torch has the ``post_grad_custom_post_pass`` option and
    ``CustomGraphPass`` (the base class its cache requires)."""
    try:
        import torch._inductor.config as config
        from torch._inductor import custom_graph_pass as cgp
    except Exception:
        return False
    return hasattr(config, "post_grad_custom_post_pass") and hasattr(cgp, "CustomGraphPass")
