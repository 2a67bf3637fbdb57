"""Dynamo: Liger's fused linear JSD and KL-div forwards as one opaque op, and their
backwards without their branch.

Liger 0.8.5's ``fused_linear_jsd_forward`` and ``fused_linear_kl_div_forward`` call their
per-chunk kernel through a ``torch.compiler.disable``'d ``dispatch()``: Dynamo breaks
the graph inside the chunk loop, cannot resume in a loop, and runs the whole forward
eagerly, at eager's speed plus the breaks' host time (1.004-1.006x on an H100).  Liger
0.8.1's JSD has no ``dispatch``, so Dynamo unrolls its loop and compiles it again at every
chunk count, as FLCE's.  Their backwards branch on ``grad_output == 1`` (data), which
breaks the graph at their autograd Function.

Under ``INDUCTOR_ADDMM_FIX_LIGER_HEAD=auto`` and ``opaque``, where Dynamo is about to
inline one of these forwards, it traces a call of
``inductor_addmm_fix::liger_distill_forward`` instead: a custom op whose kernel is
Liger's own forward, run as eager runs it, and whose fake kernel gives the shapes of its
three outputs (the loss, the input's and the weight's gradients).  Where it is about to
inline their backward with their Function, it traces
:func:`liger_head_op.scaled_gradients` (the same products without the branch).  The
Function then joins the model's graph: one graph for any token count, eager's speed,
memory and results for the loss.  Under ``loop`` nothing here acts (the chunk loops are
compiled: ``dynamo/liger_dispatch.py``).

Tiers under ``auto``, as FLCE's (``dynamo/liger_head_op.py``): a static graph whose loop
has :data:`LOOP_CHUNKS` chunks (4 to 32: Llama-like JSD heads, KL-div on small-H heads),
runs without labels and that Dynamo traces in one graph (:func:`loop_traceable`) starts
with the op, and is compiled again with Liger's loop once its length has run
``PROMOTE_AFTER`` steps and no symbolic graph has: compiled, JSD's 32-chunk loop ran at
0.66-0.73x eager's time on an H100, KL-div's 8-chunk loop at 0.85x, its 2-chunk loop
1-2 % slower than eager.  With labels Liger reads their count with ``.item()``, a graph
break at the Function: the op stays.

Only a forward this module recognises is redirected: the function of that name in Liger's
module, with Liger's parameters (0.8.1 through 0.8.5 and the nightly, see
:data:`FORWARDS`) and return line.  Another is traced as before, with one warning.  A call
whose options are not constants is traced as before too.

Upstream: none (Liger's choice, reported in docs/upstream/liger-compile-graph-breaks.md;
Dynamo unrolls a Python loop by design).
"""

from __future__ import annotations

import functools
import importlib
import json
import sys
from dataclasses import dataclass
from typing import Any, Callable

from ..patching.counters import count
from .liger_head_op import COUNTED, _kwargs, _options, autocast_as_traced, autocast_state, record_run, checked_outputs
from .liger_head_op import scaled_gradient_op, scaled_gradients
from .liger_head_op import signature

OP = "inductor_addmm_fix::liger_distill_forward"
OUTPUTS = ("loss", "grad_input", "grad_weight")


@dataclass(frozen=True)
class Forward:
    """A Liger forward this module stands the op in for."""

    loss: str  # the loss's name in messages and counters
    module: str
    function: str
    backward: str
    kernel: str  # the per-chunk kernel's name in Liger's dispatch() (0.8.5 and later)
    tensors: tuple  # its tensor parameters, in the op's order: (student input, student weight, ...)
    scalars: frozenset  # its other parameters
    returns: tuple  # its return line, as each known Liger writes it


FORWARDS = {
    f.function: f
    for f in (
        Forward(
            "jsd", "liger_kernel.ops.fused_linear_jsd", "fused_linear_jsd_forward", "fused_linear_jsd_backward",
            "jsd_loss_and_grad",
            ("student_input", "student_weight", "teacher_input", "teacher_weight", "shift_labels"),
            frozenset({"jsd_beta", "ignore_index", "has_label", "temperature", "jsd_impl", "jsd_mode", "accum_dtype"}),
            ("return total_loss, grad_input, grad_weight", "return loss, grad_input, grad_weight"),
        ),
        Forward(
            "kl_div", "liger_kernel.ops.fused_linear_kl_div", "fused_linear_kl_div_forward",
            "fused_linear_kl_div_backward", "kl_loss_and_grad", ("student_input", "student_weight", "target", "shift_labels"),
            frozenset({"reduction", "ignore_index", "has_label", "temperature", "eps", "accum_dtype"}),
            ("return loss, grad_input, grad_weight",),
        ),
    )
}  # fmt: skip
#: Liger's backwards as this module knows them: parameters, the lines of the test that
#: skips the scaling at 1.0 (either spelling), and the return line
BACKWARD_PARAMETERS = ["grad_output", "grad_input", "grad_weight"]
BACKWARD_TESTS = ("torch.equal(grad_output, torch.tensor(1.0, device=grad_output.device))",
                  "torch.ne(grad_output, torch.tensor(1.0, device=grad_output.device))")  # fmt: skip
BACKWARD_RETURN = "return grad_input, grad_weight"


def forward_of(fn: Any) -> Forward | None:
    """The :class:`Forward` that ``fn`` is by its name and module, else None."""
    spec = FORWARDS.get(getattr(fn, "__name__", None))
    return spec if spec is not None and getattr(fn, "__module__", None) == spec.module else None


def is_backward(fn: Any) -> bool:
    name, module = getattr(fn, "__name__", None), getattr(fn, "__module__", None)
    return any(name == f.backward and module == f.module for f in FORWARDS.values())


@functools.lru_cache(maxsize=8)
def backward_recognised(fn: Callable) -> bool:
    """Whether ``fn`` is a Liger backward :func:`liger_head_op.scaled_gradients` stands for."""
    from .liger_head import backward_matches

    return backward_matches(fn, BACKWARD_PARAMETERS, all_of=(BACKWARD_RETURN,), any_of=BACKWARD_TESTS)


@functools.lru_cache(maxsize=8)
def recognised(fn: Callable) -> str | None:
    """None where ``fn`` is a Liger forward this module knows, else why not."""
    from .liger_head import why_not_known

    spec = forward_of(fn)
    return why_not_known(fn, spec.tensors[:2], spec.scalars | set(spec.tensors), spec.returns, "three values")


# ---------------------------------------------------------------- the op
def _run_liger(tensors, options: str):
    """The op's kernel: Liger's forward as its autograd.Function runs it (grad mode off;
    the weight's ``requires_grad`` as it was when the graph was traced)."""
    import torch

    chosen = _options(options)
    spec = FORWARDS[chosen["function"]]
    forward = getattr(importlib.import_module(spec.module), spec.function)
    named = dict(zip(spec.tensors, tensors))
    named["student_weight"] = named["student_weight"].detach().requires_grad_(chosen["weight_grad"])
    student_input, weight = tensors[0], tensors[1]
    count(COUNTED, f"{spec.loss}:run")
    record_run(chosen.get("tier", "fixed"), (spec.loss, tuple(student_input.shape), tuple(weight.shape)))
    with torch.no_grad(), autocast_as_traced(chosen):
        outputs = forward(**{k: v for k, v in named.items() if k in signature(forward).parameters}, **_kwargs(chosen))
    return checked_outputs(spec.function, OUTPUTS, outputs, _expected(chosen, student_input, weight), student_input)


def _expected(chosen: dict, student_input, weight) -> list:
    import torch

    return [
        ((), torch.float32),
        (tuple(student_input.shape), student_input.dtype),
        (tuple(weight.shape), weight.dtype) if chosen["weight_grad"] else None,
    ]


def _fake(tensors, options: str):
    student_input, weight = tensors[0], tensors[1]
    return [
        student_input.new_empty(0) if want is None else student_input.new_empty(want[0], dtype=want[1])
        for want in _expected(_options(options), student_input, weight)
    ]


@functools.lru_cache(maxsize=None)
def liger_distill_forward():
    """``torch.ops.inductor_addmm_fix.liger_distill_forward``, registered at first use."""
    import torch

    namespace, name = OP.split("::")
    if not hasattr(getattr(torch.ops, namespace), name):
        # Liger's forwards read a count with .item(): CUDA graphs capture around them
        unsafe = getattr(torch.Tag, "cudagraph_unsafe", None)
        torch.library.define(OP, "(Tensor?[] tensors, str options) -> Tensor[]", tags=(unsafe,) if unsafe is not None else ())
        torch.library.impl(OP, "CompositeExplicitAutograd")(_run_liger)
        torch.library.register_fake(OP)(_fake)
    return getattr(getattr(torch.ops, namespace), name).default


def opaque_forward(options, weight_grad, *tensors):
    """What Dynamo traces in place of Liger's forward: the op, and None for the weight's
    gradient where Liger returns None."""
    import torch

    out = torch.ops.inductor_addmm_fix.liger_distill_forward(list(tensors), options)
    return out[0], out[1], out[2] if weight_grad else None


def scaled_pair(grad_output, grad_input, grad_weight):
    """What Dynamo traces in place of Liger's JSD and KL-div backward."""
    grad_input, grad_weight, _ = scaled_gradients(grad_output, grad_input, grad_weight, None)
    return grad_input, grad_weight


# ---------------------------------------------------------------- the tiers
def chunk_count(spec: Forward, rows, hidden, vocab, device) -> int | None:
    """How many chunks Liger's loop runs for these sizes (its formula, with the budget
    constant its module holds: KL-div's ``_CHUNK_MEM_CONST``, JSD's per GPU generation),
    or None where a size is symbolic."""
    from .liger_head import liger_chunks

    module = sys.modules.get(spec.module)
    const = 1
    if spec.loss == "kl_div":
        const = getattr(module, "_CHUNK_MEM_CONST", 1)
    elif callable(getattr(module, "_max_capability", None)) and hasattr(module, "_CHUNK_MEM_CONST_B200"):
        capability = module._max_capability(device)
        const = module._CHUNK_MEM_CONST_B300 if capability > 100 else module._CHUNK_MEM_CONST_B200 if capability == 100 else 1
    if not isinstance(const, int) or const < 1:
        return None
    return liger_chunks((rows, hidden), (vocab, hidden), const)


def tier(spec: Forward, student_input, student_weight, has_label: bool, promoted: Callable[[], bool]) -> str | None:
    """``auto``'s tier for a call whose student tensors are these example values: None
    where the loop is compiled (promoted), else ``symbolic``, ``static`` (a loop of
    :data:`LOOP_CHUNKS` chunks that Dynamo traces in one graph, counted towards
    promotion) or ``fixed``.  With labels, Liger reads their count with ``.item()``,
    which breaks the graph at its Function (with ``capture_scalar_outputs`` on, torch
    2.13 raises ``PendingUnbackedSymbolNotFound`` tracing JSD's Function): the op stays."""
    chunks = chunk_count(spec, student_input.shape[0], student_input.shape[-1], student_weight.shape[0], student_input.device)
    if chunks is None:
        return "symbolic"
    if has_label or chunks not in LOOP_CHUNKS or not loop_traceable(spec, student_input.device):
        return "fixed"
    if promoted():  # Dynamo guards on the flag read here
        return None
    return "static"


def loop_traceable(spec: Forward, device) -> bool:
    """Whether Dynamo traces the forward's chunk loop in one graph: its module calls no
    ``dispatch`` (Liger 0.8.1's JSD), or Liger's, which ``dynamo/liger_dispatch.py``
    traces for this kernel and device.  Another (a cuTile or autograd implementation, a
    ``torch.compiler.disable``'d call Dynamo would break at) keeps the op."""
    from . import liger_dispatch

    dispatcher = getattr(sys.modules.get(spec.module), "dispatch", None)
    return dispatcher is None or liger_dispatch.traces(dispatcher, spec.kernel, device)


#: ``auto``: the chunk counts whose loop a static graph compiles once promoted.  At most
#: 32, as FLCE's (a longer loop's unrolled compile: 73-76 s for JSD's 128 chunks on an
#: H100); at least 4 (KL-div's 2-chunk loop ran 0.8-1.7 % slower than eager's, its
#: 8-chunk loop 15 % faster; JSD's 32-chunk loop 27-34 % faster)
LOOP_CHUNKS = range(4, 33)
_loop_depth = 0


def tracing_promoted_loop() -> bool:
    """Whether Dynamo is inlining a forward whose loop ``auto`` promoted (its
    ``dispatch()`` is then traced: ``dynamo/liger_dispatch.py``)."""
    return _loop_depth > 0


def _traced_as_loop(stock_call: Callable[[], Any]):
    global _loop_depth
    _loop_depth += 1
    try:
        return stock_call()
    finally:
        _loop_depth -= 1


# ---------------------------------------------------------------- the redirect
def opaque_call(fn: Callable, args: list, kwargs: dict, constant: Callable, plain: Callable):
    """(tensor variables, options, weight_grad) for a call of a Liger forward that the op
    can take, else None.  ``constant`` and ``plain`` are :mod:`liger_head`'s readers of a
    traced argument.  The options' ``tier`` is ``fixed``: :func:`traced` sets it under
    ``auto``."""
    import torch
    from torch._dynamo.variables import TensorVariable

    spec = forward_of(fn)
    try:
        bound = signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None
    tensors, scalars = {}, {}
    for name, variable in bound.arguments.items():
        if name in spec.tensors and isinstance(variable, TensorVariable):
            tensors[name] = variable
            continue
        is_constant, value = constant(variable)
        if not is_constant or not plain(value) or (name in spec.tensors and value is not None):
            count(COUNTED, f"{spec.loss}:loop:not_constant")
            return None
        if name not in spec.tensors:
            scalars[name] = str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else value
    if not all(n in tensors for n in spec.tensors[:2]):
        return None
    student_input, weight = (tensors[n].as_proxy().node.meta.get("example_value") for n in spec.tensors[:2])
    if student_input is None or weight is None:
        return None
    options = {"function": spec.function, "kwargs": scalars, "weight_grad": bool(weight.requires_grad), "tier": "fixed",
               "autocast": autocast_state(student_input.device)}  # fmt: skip
    return [tensors.get(n) for n in spec.tensors], options, (student_input, weight)


def traced(variable, tx, args: list, kwargs: dict, chosen: str, stock: Callable, warn: Callable, promoted: Callable):
    """The variable Dynamo gets for a call of ``variable`` (a ``UserFunctionVariable``)
    where its function is a Liger JSD or KL-div forward or backward under ``chosen``
    (``auto``/``opaque``), or None where it traces the call as before.  ``stock`` is
    Dynamo's ``UserFunctionVariable.call_function``; ``warn(key, message)`` warns once;
    ``promoted()`` traces :func:`liger_head_op.loop_promoted` and gives its value."""
    from torch._dynamo.variables import ConstantVariable
    from torch._dynamo.variables.functions import UserFunctionVariable

    from .liger_head import _a_frame_of_its_own, _constant, _plain

    fn = variable.fn
    if chosen == "loop":
        return None
    if is_backward(fn):
        if _a_frame_of_its_own(tx, fn):
            return None
        if not backward_recognised(fn):
            count(COUNTED, "distill:backward:unrecognised")
            return None
        count(COUNTED, "distill:backward")
        scaled_gradient_op()  # registered before Dynamo traces a call of it
        return stock(UserFunctionVariable(scaled_pair), tx, args, kwargs)
    spec = forward_of(fn)
    if spec is None:
        return None
    why_not = recognised(fn)
    if why_not is not None:
        warn(f"unknown:{spec.function}:{why_not}", f"inductor_addmm_fix: Liger's {spec.function} is not one this "
             f"package recognises ({why_not}): it is compiled as Dynamo traces it")  # fmt: skip
        return None
    call = opaque_call(fn, list(args), dict(kwargs), _constant, _plain)
    if call is None:
        return None
    tensors, options, (student_input, weight) = call
    if chosen == "auto":
        has_label = bool(options["kwargs"].get("has_label"))
        options["tier"] = tier(spec, student_input, weight, has_label, promoted)
        if options["tier"] is None:
            count(COUNTED, f"{spec.loss}:loop:promoted")
            return _traced_as_loop(lambda: stock(variable, tx, args, kwargs))
    liger_distill_forward()  # registered before Dynamo traces a call of it
    count(COUNTED, f"{spec.loss}:opaque")
    items = [t if t is not None else ConstantVariable.create(None) for t in tensors]
    new_args = [ConstantVariable.create(json.dumps(options, sort_keys=True)), ConstantVariable.create(options["weight_grad"]), *items]
    return stock(UserFunctionVariable(opaque_forward), tx, new_args, {})
