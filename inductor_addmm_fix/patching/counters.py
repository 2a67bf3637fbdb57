"""What the patches did, counted where torch counts its own events:
``torch._dynamo.utils.counters["inductor_addmm_fix"]["<what>:<event>"]``.  Tests and
users read them (``addmm.dtype:product_then_epilogue``, ``slice_writes:chains``, ...)."""

from __future__ import annotations

COUNTER = "inductor_addmm_fix"


def count(what: str, event: str, n: int = 1) -> None:
    """``counters["inductor_addmm_fix"]["<what>:<event>"] += n``."""
    from torch._dynamo.utils import counters

    counters[COUNTER][f"{what}:{event}"] += n
