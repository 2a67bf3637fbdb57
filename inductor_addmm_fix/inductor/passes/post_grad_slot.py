"""The post-grad pass slot, ``torch._inductor.config.post_grad_custom_post_pass``.

Inductor has one slot for a custom pass after its own post-grad passes, before
re-inplacing and lowering.  The package puts there one pass that runs what the user
(or another library) had put there first, then the package's passes that are applied,
in the order of :data:`ORDER`, the one place that order is written.  A pass module adds
itself with :func:`register`, a patch of :data:`PASSES`, so that each pass is applied
and rolled back with its own feature; the slot patch (:func:`plan`) is machinery,
applied while any pass is.

The previous value stays reachable as ``.previous``, so that uninstalling puts the
same object back.  The pass's ``uuid()`` (which the FX graph cache keys on) covers the
passes that run, the source of every module of this folder (the passes and what they
share), the settings a pass module reports (its
``cache_settings()`` hook, if it has one: ``patching/protocol.py``), and the previous
passes' uuids.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import torch.fx as fx

from ...patching.declare import Decision, needed
from ...patching.probes import config_is_per_thread, hash_of_files
from ...patching.protocol import FeatureModule, hook
from ...patching.config_options import ConfigOption, WrapValue
from ...patching.registry import Patch
from ...patching.slots import DictEntry

RETIRED_BY = "none: the slot is how a plugin adds post-grad passes"

#: The package's post-grad passes, in the order they run:
ORDER = (
    "slice_writes",  # chunked writes into slices of one buffer: the others see the rewritten writes
    "accumulate_pairs",  # two chunks' accumulates merged into one update
    "chunk_order",  # then the chunks (and the pairs) kept in order, on the rewritten graph
)

#: name -> pass: the package's passes that are applied.  Each entry is a patch of its
#: own feature; the chained pass reads this table when it runs.
PASSES: dict[str, Callable[[fx.Graph], int]] = {}


def register(name: str, graph_pass: Callable[[fx.Graph], int]) -> Patch:
    """The patch that makes ``graph_pass`` run in the slot, at its place in :data:`ORDER`."""
    if name not in ORDER:
        raise ValueError(f"post-grad pass {name!r} has no place in post_grad_slot.ORDER")
    slot = DictEntry(PASSES, name, "inductor_addmm_fix post-grad passes")
    return Patch(f"inductor.pass.{name}", slot, graph_pass)


def active_passes() -> list[tuple[str, Callable[[fx.Graph], int]]]:
    """(name, pass) of the applied passes, in the order they run."""
    return [(name, PASSES[name]) for name in ORDER if name in PASSES]


def supported() -> bool:
    """Whether this torch has the ``post_grad_custom_post_pass`` option and
    ``CustomGraphPass`` (the base class its cache requires)."""
    try:
        import torch._inductor.config as config
        from torch._inductor import custom_graph_pass as cgp
    except Exception:
        return False
    return hasattr(config, "post_grad_custom_post_pass") and hasattr(cgp, "CustomGraphPass")


def _passes_in(value: Any) -> tuple:
    """The passes a value of the option holds (None, a pass, or a list or tuple of them):
    torch's own reading where it has one (``get_custom_graph_passes``)."""
    try:
        from torch._inductor.custom_graph_pass import get_custom_graph_passes
    except ImportError:
        if value is None:
            return ()
        return tuple(value) if isinstance(value, (list, tuple)) else (value,)
    return tuple(get_custom_graph_passes(value))


def _pass_uuid(p: Any) -> Any:
    uuid = getattr(p, "uuid", None)
    return uuid() if callable(uuid) else None


def make_chained_pass(previous: Any) -> Any:
    """The value for ``post_grad_custom_post_pass``: runs ``previous`` (None, a pass, or a
    list/tuple of them, as torch accepts), then :func:`active_passes`."""
    from torch._inductor import custom_graph_pass as cgp

    inference_aware = getattr(cgp, "CustomInferenceAwareGraphPass", None)
    base = inference_aware or cgp.CustomGraphPass

    class PostGradPasses(base):  # type: ignore[misc, valid-type]
        """inductor_addmm_fix: the user's post-grad passes, then the package's."""

        inductor_addmm_fix_chained = True

        def __init__(self, previous):
            self.previous = previous

        @property
        def passes(self) -> tuple[str, ...]:
            return tuple(name for name, _ in active_passes())

        def __call__(self, graph: fx.Graph, is_inference: bool = False) -> None:
            for p in _passes_in(self.previous):
                if inference_aware is not None and isinstance(p, inference_aware):
                    p(graph, is_inference=is_inference)
                else:
                    p(graph)
            for _, run in active_passes():
                run(graph)  # each one never raises

        def uuid(self) -> Any:
            """None (the FX graph cache bypasses) if a previous pass has no uuid, as
            stock Inductor does for that pass alone."""
            prev = tuple(_pass_uuid(p) for p in _passes_in(self.previous))
            if any(u is None for u in prev):
                return None
            ours = active_passes()
            modules = [sys.modules[p.__module__] for _, p in ours]
            # the passes' own files and those they read their graphs with (fx_support, ...)
            here = os.path.dirname(__file__)
            files = {*(os.path.join(here, f) for f in os.listdir(here) if f.endswith(".py")), *(m.__file__ for m in modules)}
            hooked = [hook(m, FeatureModule.cache_settings) for m in modules]
            settings = tuple(cache_settings() if cache_settings is not None else () for cache_settings in hooked)
            return ("inductor_addmm_fix.post_grad", tuple(n for n, _ in ours), hash_of_files(tuple(sorted(files))),
                    settings, prev)

        def __repr__(self) -> str:
            return f"PostGradPasses({', '.join(self.passes)}; previous={self.previous!r})"

    return PostGradPasses(previous)


def is_chained_pass(value: Any) -> bool:
    return bool(getattr(value, "inductor_addmm_fix_chained", False))


def plan(users: tuple[str, ...], package_version: str) -> list[Decision]:
    """The slot patch: our chained pass in ``post_grad_custom_post_pass`` (process-wide
    where config assignments are per thread)."""
    import torch._inductor.config as inductor_config

    name = "inductor.post_grad_slot"
    slot = ConfigOption(
        inductor_config,
        "post_grad_custom_post_pass",
        "torch._inductor.config",
        WrapValue(make_chained_pass, is_chained_pass),
        per_thread=config_is_per_thread(inductor_config, "post_grad_custom_post_pass"),
    )
    reason = f"runs the applied post-grad passes ({', '.join(users)}) after the user's own"
    return [needed(name, reason, [Patch(name, slot)], probe=supported, obsolete_when=RETIRED_BY)]
