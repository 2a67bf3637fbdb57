"""Dynamo: under ``INDUCTOR_ADDMM_FIX_LIGER_HEAD=loop``, and where ``auto`` promoted a
static graph to the loop, Liger's JSD and KL-div chunk loops are compiled: their per-chunk
``dispatch`` is traced as the implementation it resolves.

Liger 0.8.5's ``fused_linear_jsd_forward`` and ``fused_linear_kl_div_forward`` call
their per-chunk kernel through ``liger_kernel.backends.dispatch.dispatch``, which
carries ``@torch.compiler.disable``.  Dynamo cannot resume inside a loop after that
graph break, so the whole loop runs eagerly: compiled, these losses run at eager's speed
plus Dynamo's overhead (1.004-1.006x on an H100).  Compiled with the call traced, JSD
ran at 0.66-0.73x eager's time, but with 93-376 MiB more memory than eager and a compile
of 18-76 s per static length (docs/gpu-results.md), and a loop whose chunk count changes
with the length compiles again at every count, as FLCE's did.  So this runs only where
the user asked for compiled loops (the ``loop`` setting) and where ``auto`` promoted a
static graph of a short loop (``dynamo/liger_distill_head.py``: a length that does not
change); elsewhere each of these forwards is one opaque op.

Where Dynamo is about to skip a call of Liger's ``dispatch`` for ``jsd_loss_and_grad``
or ``kl_loss_and_grad`` with no implementation asked for, we resolve the implementation
as Liger does (``resolve_impl`` of the same module, for the device of the first tensor
argument) while tracing and trace a call of its ``forward`` with the same arguments.
The resolution is not guarded: a process that changes Liger's implementation choice
after compiling (``set_impl``, ``LIGER_KERNEL_STRICT``) keeps the compiled one.  An
implementation registered as an autograd Function, an ``impl=`` or ``backend=``
argument, or another op keeps the stock graph break.

Upstream: none (Liger's choice, reported in docs/upstream/liger-compile-graph-breaks.md).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from ..patching.counters import count
from ..patching.declare import Decision, needed, require
from ..patching.registry import Patch
from ..patching.slots import Attribute
from . import liger_distill_head, liger_head
from .liger_head_op import COUNTED

NAME = "dynamo.liger_dispatch_traced"
RETIRED_BY = "none: Liger 0.8.5 wraps its dispatch() in torch.compiler.disable"
MODULE = "liger_kernel.backends.dispatch"
FUNCTION = "dispatch"
#: the per-chunk kernels of JSD and KL-div, whose loops this traces
OPS = frozenset(forward.kernel for forward in liger_distill_head.FORWARDS.values())


def is_liger_dispatch(value: Any) -> bool:
    """Whether ``value`` is the ``torch.compiler.disable`` wrapper of Liger's ``dispatch``."""
    if not getattr(value, "_torchdynamo_disable", False):
        return False
    inner = getattr(value, "_torchdynamo_orig_callable", None) or getattr(value, "__wrapped__", None)
    return getattr(inner, "__name__", None) == FUNCTION and getattr(inner, "__module__", None) == MODULE


def _device(args: list) -> Any:
    from torch._dynamo.variables import TensorVariable

    for arg in args:
        if isinstance(arg, TensorVariable):
            example = arg.as_proxy().node.meta.get("example_value")
            if example is not None:
                return example.device
    return None


def resolved_forward(args: list, kwargs: dict) -> Callable[..., Any] | None:
    """The ``forward`` that Liger's dispatch would call for these arguments, or None where
    this module leaves the call to Dynamo (see the module docstring)."""
    if not args or not args[0].is_python_constant() or args[0].as_python_constant() not in OPS:
        return None
    for name in ("impl", "backend"):
        chosen = kwargs.get(name)
        if chosen is not None and not (chosen.is_python_constant() and chosen.as_python_constant() is None):
            return None
    device = _device(args[1:])
    return None if device is None else implementation_forward(args[0].as_python_constant(), device)


def implementation_forward(op_name: str, device: Any) -> Callable[..., Any] | None:
    """The ``forward`` of the implementation Liger's dispatch resolves for ``op_name`` on
    ``device`` with none asked for, or None where there is none this module traces (no
    dispatch module, nothing usable, an autograd Function)."""
    module = sys.modules.get(MODULE)
    if module is None or not callable(getattr(module, "resolve_impl", None)):
        return None
    try:
        implementation = module.resolve_impl(op_name, requested=None, device=device)
    except Exception:  # noqa: BLE001  (Liger raises where nothing is usable: the stock skip then runs it eagerly)
        return None
    if getattr(implementation, "autograd_function", None) is not None:
        return None
    return getattr(implementation, "forward", None)


def traces(dispatcher: Any, op_name: str, device: Any) -> bool:
    """Whether a call ``dispatcher(op_name, ...)`` with a tensor on ``device`` is traced
    when :func:`liger_distill_head.tracing_promoted_loop` is true: ``dispatcher`` is
    Liger's, this module's patch is applied, and the call resolves."""
    from ..installer import applied_patches

    return (
        is_liger_dispatch(dispatcher)
        and any(patch.name == NAME for patch in applied_patches())
        and implementation_forward(op_name, device) is not None
    )


def traced_dispatch(stock: Callable[..., Any]) -> Callable[..., Any]:
    """``SkipFunctionVariable.call_function`` that traces the resolved implementation of
    Liger's dispatch under the ``loop`` setting."""
    from torch._dynamo.variables.functions import UserFunctionVariable

    def call_function(self, tx, args, kwargs):
        if is_liger_dispatch(getattr(self, "value", None)) and (
            liger_head.mode() == "loop" or liger_distill_head.tracing_promoted_loop()
        ):
            forward = resolved_forward(list(args), dict(kwargs))
            if forward is not None:
                count(COUNTED, "dispatch:traced")
                rest = {k: v for k, v in kwargs.items() if k not in ("impl", "backend")}
                return UserFunctionVariable(forward).call_function(tx, list(args[1:]), rest)
            count(COUNTED, "dispatch:skipped")
        return call_function.stock(self, tx, args, kwargs)

    call_function.stock = stock  # type: ignore[attr-defined]
    call_function.splices = True  # type: ignore[attr-defined]
    return call_function


def plan() -> list[Decision]:
    from torch._dynamo.variables.functions import SkipFunctionVariable

    require(callable(vars(SkipFunctionVariable).get("call_function")), "SkipFunctionVariable.call_function")
    slot = Attribute(SkipFunctionVariable, "call_function", "torch._dynamo.variables.functions.SkipFunctionVariable")
    reason = (
        "Liger's JSD and KL-div call their chunk kernel through a torch.compiler.disable'd dispatch(): "
        "their chunk loops run eagerly under compile (traced under the loop setting)"
    )
    return [needed(NAME, reason, [Patch(NAME, slot, traced_dispatch)], probe="dynamo.liger_dispatch.plan", obsolete_when=RETIRED_BY)]
