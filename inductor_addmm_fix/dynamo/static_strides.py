"""Dynamo: the strides of a tensor with a static shape are ints.

``TensorVariable.specialize`` records the sizes and strides of a tensor whose shape has
no free symbols, for ``x.size()`` / ``x.stride()`` to answer as constants.  It turns the
sizes into ints but keeps the strides as they come: a stride that was symbolic when the
fake tensor was made and has since been specialized to a number is still a ``SymInt``.
``x.stride(d)`` then builds a ``ConstantVariable`` of a ``SymInt`` and Dynamo fails with
``Cannot construct ConstantVariable for value of type <class 'torch.SymInt'>``.  Liger's
FLCE passes ``logits_chunk.stride(-2)`` to its kernel; after a change of vocabulary or
hidden size (Liger's own test file, one compiled function serving every case) the
compile fails there.

We make those strides ints, as the sizes already are (their values are known: no free
symbols).

Upstream: none known (``TensorVariable.specialize`` casts ``_size`` only).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..patching.declare import Decision, needed, not_needed, require
from ..patching.registry import Patch
from ..patching.slots import Attribute

RETIRED_BY = "none known: TensorVariable.specialize keeps SymInt strides of a static shape"
NAME = "dynamo.static_strides_as_ints"


def strides_as_ints(stock: Any) -> Any:
    """``TensorVariable.specialize`` (a staticmethod) whose recorded strides are ints."""
    from torch.fx.experimental.symbolic_shapes import is_symbolic

    function: Callable[..., Any] = stock.__func__ if isinstance(stock, staticmethod) else stock

    def specialize(value: torch.Tensor) -> dict[str, Any]:
        props = function(value)
        stride = props.get("stride")
        if stride is not None:
            props["stride"] = tuple(int(s) if is_symbolic(s) else s for s in stride)
        return props

    specialize.__wrapped__ = function  # type: ignore[attr-defined]
    return staticmethod(specialize)


def _stock_specialize() -> Callable[..., Any]:
    from torch._dynamo.variables.tensor import TensorVariable

    function = vars(TensorVariable)["specialize"].__func__
    return getattr(function, "__wrapped__", function)  # the stock one, also while ours is in place


def specialized_strides_stay_symbolic(specialize: Callable[..., Any] | None = None) -> bool:
    """Whether a stride specialized after its fake tensor was made is recorded as a
    ``SymInt`` by ``specialize`` (default: the stock function), on a scratch ShapeEnv:
    a symbol, a tensor with that stride, then the symbol pinned to 8."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    shape_env = ShapeEnv()
    symbol = shape_env.create_symbol(8, ConstantSource("inductor_addmm_fix_stride_probe"), dynamic_dim=DimDynamic.DYNAMIC)
    stride = shape_env.create_symintnode(symbol, hint=8)
    with FakeTensorMode(shape_env=shape_env):
        tensor = torch.empty_strided((2, 8), (stride, 1))
    torch._check(stride == 8)
    recorded = (specialize or _stock_specialize())(tensor).get("stride") or ()
    return any(isinstance(s, torch.SymInt) for s in recorded)


def plan() -> list[Decision]:
    from torch._dynamo.variables.tensor import TensorVariable

    require(isinstance(vars(TensorVariable).get("specialize"), staticmethod), "TensorVariable.specialize (a staticmethod)")
    probe = specialized_strides_stay_symbolic
    if not probe():
        return [not_needed(NAME, "Dynamo records the strides of a static shape as ints", probe=probe, obsolete_when=RETIRED_BY)]
    slot = Attribute(TensorVariable, "specialize", "torch._dynamo.variables.tensor.TensorVariable")
    reason = (
        "x.stride(d) of a static-shaped tensor whose stride was specialized after it was made fails "
        "(Cannot construct ConstantVariable for a SymInt: Liger FLCE after a change of H or V)"
    )
    return [needed(NAME, reason, [Patch(NAME, slot, strides_as_ints)], probe=probe, obsolete_when=RETIRED_BY)]


def self_test() -> None:
    """After patching, the probe's stride is an int."""
    from ..patching.declare import PlanError

    from torch._dynamo.variables.tensor import TensorVariable

    if specialized_strides_stay_symbolic(TensorVariable.specialize):
        raise PlanError("self-test failed after patching: a specialized stride is still recorded as a SymInt")
