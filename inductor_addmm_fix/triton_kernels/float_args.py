"""User Triton kernels: a float argument that comes into the graph is read at run time.

With Dynamo's default ``specialize_float=False`` a Python float that enters a frame
(Liger's class-weight sum, an ``.item()`` made before a graph break) becomes a 0-d
float64 tensor input and a backed ``SymFloat`` read from it.  AOTAutograd's
``tensorify_python_scalars`` then rewrites float arithmetic into tensor arithmetic, and
every ``SymFloat`` it cannot rewrite is specialized: the frame is traced again with the
value as a constant, guarded by ``value == 3854.43``.  A float handed to a user Triton
kernel is such a use, so a class-weighted Liger FLCE recompiles on every batch until
Dynamo's recompile limit, after which the frame silently runs eagerly.

Before that pass, each such kernel argument is replaced by an in-graph read of the same
tensor input, ``_local_scalar_dense(prims.convert_element_type(x, float32))``: an
*unbacked* float that Inductor passes to the kernel at run time, as it does for the
floats ``capture_scalar_outputs=True`` produces.  The cast is Triton's own: a Python
float reaches a kernel as fp32.  A dead use the pass knows how to tensorify keeps the
backed symbol from being specialized.  Anything else is left to the stock pass, and
this one never raises.

Upstream: none known (tensorify_python_scalars has no rule for higher-order ops).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import torch

from ..patching.counters import count
from ..patching.declare import Decision, needed, not_needed, require
from ..patching.registry import Patch
from ..patching.slots import Attribute

log = logging.getLogger(__name__)
RETIRED_BY = "none known: tensorify_python_scalars specializes floats passed to user Triton kernels"
NAME = "triton.float_arguments_at_run_time"
PREFIX = "float_args"  # counted as "float_args:<event>" in counters["inductor_addmm_fix"]


def _kernel_wrappers() -> tuple:
    from torch._higher_order_ops import triton_kernel_wrap as tkw

    return tuple(getattr(tkw, n) for n in ("triton_kernel_wrapper_functional", "triton_kernel_wrapper_mutation") if hasattr(tkw, n))


def _backed_float_read(node: Any) -> Any:
    """The tensor input whose ``.item()`` ``node`` is, when ``node``'s value is a backed
    float symbol read from it; else None."""
    import sympy
    import torch.fx as fx
    from torch.utils._sympy.symbol import SymT, symbol_is_type

    if not isinstance(node, fx.Node) or node.op != "call_function":
        return None
    if node.target is not torch.ops.aten._local_scalar_dense.default:
        return None
    val = node.meta.get("val")
    if not isinstance(val, torch.SymFloat):
        return None
    expr = val.node.expr
    if not (isinstance(expr, sympy.Symbol) and symbol_is_type(expr, SymT.FLOAT)):
        return None
    source = node.args[0]
    return source if isinstance(source, fx.Node) else None


def read_float_arguments_at_run_time(gm: torch.fx.GraphModule, shape_env: Any, fake_mode: Any) -> int:
    """Rewrite the float arguments of user Triton kernels in ``gm`` (see the module
    docstring).  Returns the number of arguments rewritten."""
    from torch.fx.experimental.symbolic_shapes import compute_unbacked_bindings

    aten, prims = torch.ops.aten, torch.ops.prims
    graph = gm.graph
    wrappers = _kernel_wrappers()
    reads: dict[Any, Any] = {}  # float read -> its run-time replacement
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in wrappers:
            continue
        kwargs = dict(node.kwargs.get("kwargs", {}))
        changed = False
        for name, arg in kwargs.items():
            source = _backed_float_read(arg)
            if source is None:
                continue
            if arg not in reads:
                with graph.inserting_after(arg):
                    # A dead use tensorify rewrites: the backed symbol counts as tensorified.
                    zero = graph.call_function(aten.scalar_tensor.default, (0.0,), {"dtype": torch.float64})
                with graph.inserting_after(zero):
                    keep = graph.call_function(aten.add.Tensor, (zero, arg))
                with graph.inserting_after(keep):
                    fp32 = graph.call_function(prims.convert_element_type.default, (source, torch.float32))
                with graph.inserting_after(fp32):
                    read = graph.call_function(aten._local_scalar_dense.default, (fp32,))
                with fake_mode:
                    zero.meta["val"] = torch.scalar_tensor(0.0, dtype=torch.float64)
                    keep.meta["val"] = torch.empty((), dtype=torch.float64)
                    fp32.meta["val"] = torch.empty((), dtype=torch.float32, device=source.meta["val"].device)
                value = shape_env.create_unbacked_symfloat()
                read.meta["val"] = value
                read.meta["unbacked_bindings"] = compute_unbacked_bindings(shape_env, value)
                reads[arg] = read
            kwargs[name] = reads[arg]
            changed = True
            rewritten += 1
        if changed:
            node.update_kwarg("kwargs", kwargs)
    if rewritten:
        # Inductor propagates fake values through the new .item() again.
        fake_mode.allow_scalar_outputs = True
        graph.lint()
        gm.recompile()
        count(PREFIX, "arguments", rewritten)
    return rewritten


def tensorify_reading_kernel_floats_at_run_time(stock: Callable[..., Any]) -> Callable[..., Any]:
    """``tensorify_python_scalars``, after rewriting the float arguments of user Triton kernels."""

    def tensorify_python_scalars(gm, shape_env, fake_mode, *args: Any, **kwargs: Any):
        try:
            read_float_arguments_at_run_time(gm, shape_env, fake_mode)
        except Exception as error:  # the stock pass then specializes, as without us
            count(PREFIX, "error")
            log.warning("float_args: graph left to the stock pass (%s: %s)", type(error).__name__, error)
        return stock(gm, shape_env, fake_mode, *args, **kwargs)

    tensorify_python_scalars.stock = stock  # type: ignore[attr-defined]
    return tensorify_python_scalars


def floats_enter_graphs_as_tensors() -> bool:
    """Whether Dynamo turns incoming floats into tensor inputs (``specialize_float``
    off), the case the tensorify pass specializes."""
    import torch._dynamo.config as dynamo_config

    return getattr(dynamo_config, "specialize_float", True) is False


#: Where AOTAutograd calls the pass by its global name (2.8: jit_compile_runtime_wrappers).
CALLERS = ("torch._functorch._aot_autograd.graph_compile", "torch._functorch._aot_autograd.jit_compile_runtime_wrappers")


def tensorify_caller() -> Any:
    """The AOTAutograd module that imports ``tensorify_python_scalars`` by name, or None."""
    import importlib

    for name in CALLERS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if callable(vars(module).get("tensorify_python_scalars")):
            return module
    return None


def plan() -> list[Decision]:
    caller = tensorify_caller()
    require(caller is not None, "AOTAutograd module calling tensorify_python_scalars by name")
    require(bool(_kernel_wrappers()), "triton_kernel_wrapper_functional / _mutation")
    probe = floats_enter_graphs_as_tensors
    if not probe():
        return [not_needed(NAME, "Dynamo specializes floats by configuration (specialize_float)", probe=probe, obsolete_when=RETIRED_BY)]
    slot = Attribute(caller, "tensorify_python_scalars", caller.__name__)
    reason = (
        "a float passed to a user Triton kernel is specialized by tensorify_python_scalars: "
        "one recompile per value (Liger FLCE with class weights: every batch)"
    )
    return [needed(NAME, reason, [Patch(NAME, slot, tensorify_reading_kernel_floats_at_run_time)], probe=probe, obsolete_when=RETIRED_BY)]
