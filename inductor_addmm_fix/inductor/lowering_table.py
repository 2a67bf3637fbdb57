"""Entries of Inductor's lowering table (``torch._inductor.lowering.lowerings``), made
as ``register_lowering`` makes them, for the lowerings of several features
(``out_dtype``, ``reinplace``, ``accumulate_kernel``).  It patches nothing and belongs
to no feature: a feature's module imports it, not another feature's module."""

from __future__ import annotations

from typing import Any, Callable


def as_registered_lowering(op: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``fn`` the way ``register_lowering`` does, without touching ``lowerings``."""
    from torch._inductor import lowering as L

    scratch: dict = {}
    L.register_lowering(op, type_promotion_kind=None, lowering_dict=scratch)(fn)
    return scratch[op]
