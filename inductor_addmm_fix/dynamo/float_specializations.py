"""Dynamo: a float specialized while compiling one frame stays specialized in that frame only.

When AOTAutograd cannot turn a float input into tensor arithmetic, it names the float's
symbol (``zf2``) in ``TensorifyState`` and Dynamo traces the frame again with that float
as a constant.  ``TensorifyState`` is a class-level set that is cleared only when a
compile restarts for another reason: after the frame compiles, the names stay, and the
next frame that numbers a float input ``zf2`` specializes it too.  Symbols are numbered
per frame, so the collision is common: in Liger FLCE a float that a frame merely passes
on (an ``.item()`` before a graph break) makes the class-weight sum of the next frame a
constant, guarded by its value, and every batch recompiles.

We clear the set before and after each frame's compile (``convert_frame._compile``, which
holds the restart loop that the set serves, in every release from 2.8).

Upstream: none known (``TensorifyState.clear()`` runs on other restarts only).
"""

from __future__ import annotations

from typing import Any, Callable

from ..patching.declare import Decision, needed, require
from ..patching.probes import global_names
from ..patching.registry import Patch
from ..patching.slots import Attribute

RETIRED_BY = "none known: TensorifyState outlives the frame whose compile filled it"
NAME = "dynamo.float_specializations_per_frame"


def specializations_per_frame(stock: Callable[..., Any]) -> Callable[..., Any]:
    """``_compile`` that starts and ends with no float named for specialization."""
    from torch._dynamo.symbolic_convert import TensorifyState

    def _compile(*args: Any, **kwargs: Any) -> Any:
        TensorifyState.clear()
        try:
            return stock(*args, **kwargs)
        finally:
            TensorifyState.clear()

    _compile.__wrapped__ = stock  # type: ignore[attr-defined]
    return _compile


def specializations_outlive_the_frame() -> bool:
    """Whether ``TensorifyState`` is a process-wide set (not per frame)."""
    from torch._dynamo.symbolic_convert import TensorifyState

    return isinstance(getattr(TensorifyState, "force_specializations", None), set)


def plan() -> list[Decision]:
    from torch._dynamo import convert_frame

    require(callable(getattr(convert_frame, "_compile", None)), "torch._dynamo.convert_frame._compile")
    # Its caller must look it up by its global name for the wrapper to take effect.
    caller = getattr(getattr(convert_frame, "ConvertFrameAssert", None), "__call__", None)
    require("_compile" in global_names(caller), "ConvertFrameAssert.__call__ calling _compile by name")
    probe = specializations_outlive_the_frame
    require(probe(), "torch._dynamo.symbolic_convert.TensorifyState.force_specializations")
    slot = Attribute(convert_frame, "_compile", "torch._dynamo.convert_frame")
    reason = (
        "a float specialized while compiling one frame is specialized in every later frame "
        "whose float input has the same symbol name (Liger FLCE with class weights: a recompile per batch)"
    )
    return [needed(NAME, reason, [Patch(NAME, slot, specializations_per_frame)], probe=probe, obsolete_when=RETIRED_BY)]

