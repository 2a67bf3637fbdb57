"""Dynamo: Liger's FLCE forward as one opaque op where its chunk loop would recompile.

Liger's ``fused_linear_cross_entropy_forward`` runs ``for chunk_id in range(num_chunks)``
with ``num_chunks`` about ``V / H`` (128 at H 1024, V 151936) and a function of the
token count.  Dynamo unrolls the loop and guards on the count, so with symbolic token
counts every length that gives a new count compiles the whole loop again, minutes each
(docs/upstream/dynamo-loop-over-a-symbolic-count.md), until the recompile limit sends
the frame to eager.

Where Dynamo is about to inline that function, this patch traces a call of
``inductor_addmm_fix::liger_flce_forward`` instead: a custom op whose kernel is Liger's
own function, run as eager runs it, and whose fake kernel gives its outputs' shapes.
The graph holds one node for the head: its compile costs what a plain cross entropy's
does, one graph serves every token count, and the head runs at eager's speed with
eager's memory and results (the same code on the same inputs; with
``use_token_scaling``, Liger's code with its boolean-mask indexing rewritten as a
masked gather, the same results without a host sync per chunk, faster than eager:
``dynamo/liger_token_scaling.py``).  Liger is not changed
on disk or in memory, and eager code never sees this: only Dynamo's inlining is
redirected.

Liger's backward (``fused_linear_cross_entropy_backward``) branches on
``torch.equal(grad_output, 1.0)``, a data-dependent test at which Dynamo breaks the graph
around Liger's autograd Function, so that its forward becomes a frame of its own.  Where
Dynamo would inline that backward (``auto`` and ``opaque``), it traces
:func:`liger_head_op.scaled_gradients` instead: the same products without the branch, bit
for bit, in the saved gradients' buffers, and the Function joins the model's graph.

Which calls, ``INDUCTOR_ADDMM_FIX_LIGER_HEAD``:

* ``auto`` (default): the op first everywhere; Liger's loop compiled later where the
  lengths turn out not to change.  A static graph whose loop has at most
  :data:`LOOP_MAX_CHUNKS` chunks (Llama-like heads, V / H up to about 32) starts with the
  op and is compiled again with the loop once one length has run
  :data:`liger_head_op.PROMOTE_AFTER` steps and no graph with a symbolic token count has
  (the tiers: ``dynamic/liger_head_op.py``): a fixed-length run then gets the loop, which
  the package's passes make faster than eager, and a run whose lengths change never
  compiles it (its second length gives a symbolic graph, with the op).  Where the token
  count is symbolic (automatic dynamic shapes, ``dynamic=True``, ``mark_dynamic``),
  where the loop is longer (small hidden sizes with large vocabularies: 64-148 chunks,
  whose unrolled compile costs more than a plain cross entropy's whole model) and where
  an option makes the loop break the graph (:data:`LOOP_BREAKING_OPTIONS`), the op
  stays;
* ``loop``: always the loop, and Liger's backward, as Dynamo traces them (and the chunk
  loops of Liger's JSD and KL-div: ``dynamo/liger_dispatch.py``);
* ``opaque``: always the opaque op (the shortest compile, eager's speed for the head).

Liger's fused linear JSD and KL-div take an op of their own under ``auto`` and
``opaque``, with tiers of their own under ``auto`` (``dynamo/liger_distill_head.py``,
called from the same redirect).

Only a Liger forward this module recognises is redirected: the function of that name
in ``liger_kernel.ops.fused_linear_cross_entropy``, with Liger's parameters (those of
0.8.1 through 0.8.5 and the nightly, see :data:`PARAMETERS`), returning Liger's seven
values.  Another (a Liger that changed them) is traced as before, with one warning.  A
call whose options are not constants (a symbolic ``label_smoothing``, an object for
``ce_impl``) is traced as before too.

Upstream: none known (Dynamo unrolls a Python loop over a symbolic count by design;
``torch.compiler.nested_compile_region`` compiles a chunk body once only from torch 2.13,
and not for a body that mutates its inputs at different offsets before it).
"""

from __future__ import annotations

import functools
import inspect
import json
from typing import Any, Callable

from ..settings import LIGER_HEAD, LIGER_HEAD_MODES
from ..patching.counters import count
from ..patching.declare import Decision, needed, require
from ..patching.registry import Patch
from ..patching.slots import Attribute
from ..patching.warn import warn_once
from . import liger_distill_head, liger_head_op, liger_token_scaling
from .liger_head_op import BACKWARD, BACKWARD_PARAMETERS, BACKWARD_SOURCE, COUNTED, FUNCTION, MODULE, TENSORS
from .liger_head_op import autocast_state, liger_flce_forward, opaque_forward
from .liger_head_op import VARIABLE  # noqa: F401  (the setting's name, for messages and tests)
from .liger_head_op import signature as _signature

NAME = "dynamo.liger_flce_forward_opaque"
RETIRED_BY = "none known: Dynamo unrolls Liger's chunk loop and guards on the chunk count"
MODES = LIGER_HEAD_MODES
#: ``auto``: the longest loop compiled in a static graph (the chunks of one call)
LOOP_MAX_CHUNKS = 32
#: ``auto``: Liger's options under which a static graph keeps the op.
#: ``use_token_scaling``: Liger's loop indexes each chunk with a boolean mask and tests
#: the length of the result, so Dynamo runs that loop eagerly; traced from the forward
#: ``dynamo/liger_token_scaling.py`` rewrites, it compiles, but the op, which runs that
#: rewritten forward without host syncs, is faster still (Llama-3-8B head, H100: the
#: promoted loop 1.013x eager's time, the op 0.848x; Liger's own loop promoted 1.019x)
LOOP_BREAKING_OPTIONS = ("use_token_scaling",)

#: Every parameter of the forward this module knows (0.8.1-0.8.5 and the nightly).
PARAMETERS = frozenset(TENSORS) | {
    "ignore_index", "lse_square_scale", "label_smoothing", "reduction", "softcap", "return_z_loss",
    "accum_dtype", "use_token_scaling", "return_token_accuracy", "return_predicted_tokens", "ce_impl",
    "ce_mode", "compute_gradients", "weight_requires_grad", "chunk_mem_const",
}  # fmt: skip
#: What the forward returns, as its source writes it.
RETURNS = "return loss, z_loss, token_accuracy, predicted_tokens, grad_input, grad_weight, grad_bias"

_warned: set = set()


# ---------------------------------------------------------------- the setting
def mode(environ=None) -> str:
    """The value of INDUCTOR_ADDMM_FIX_LIGER_HEAD (``auto`` when unset or not a mode,
    which warns once)."""
    return LIGER_HEAD.value(environ) or "auto"


def settings() -> str | None:
    """What the status shows beside "applied" where the setting is not the default."""
    return LIGER_HEAD.status()


def _warn_once(key: str, message: str) -> None:
    if key in _warned:
        return
    _warned.add(key)
    warn_once(f"liger_head:{key}", message)


# ---------------------------------------------------------------- recognising Liger's forward
def is_liger_forward(fn: Any) -> bool:
    return getattr(fn, "__name__", None) == FUNCTION and getattr(fn, "__module__", None) == MODULE


def is_liger_backward(fn: Any) -> bool:
    return getattr(fn, "__name__", None) == BACKWARD and getattr(fn, "__module__", None) == MODULE


def _a_frame_of_its_own(tx, fn: Callable) -> bool:
    """Whether Dynamo traces Liger's Function's backward as a frame of its own (called
    by autograd inside a compiled region), not inside the Function with the model: there
    the saved gradients are the frame's inputs, which no graph donates, so the products
    would take new buffers where Liger scales them in place."""
    code = getattr(getattr(getattr(tx, "output", None), "root_tx", None), "f_code", None)
    return code is not None and code.co_name == "backward" and code.co_filename == fn.__code__.co_filename


def _signature_and_source(fn: Callable) -> tuple[inspect.Signature, str]:
    """``fn``'s signature and its source on one line (whitespace collapsed); raises
    TypeError, ValueError or OSError where either cannot be read."""
    return _signature(fn), " ".join(inspect.getsource(fn).split())


def backward_matches(fn: Callable, parameters: list, all_of=(), any_of=()) -> bool:
    """Whether ``fn`` takes exactly ``parameters`` and its source has every line of
    ``all_of`` and, where ``any_of`` names some, one of them."""
    try:
        signature, source = _signature_and_source(fn)
    except (TypeError, ValueError, OSError):
        return False
    return (list(signature.parameters) == parameters and all(line in source for line in all_of)
            and (not any_of or any(line in source for line in any_of)))  # fmt: skip


def why_not_known(fn: Callable, first, known, returns, values: str) -> str | None:
    """None where ``fn`` takes ``first`` as its first parameters and only ``known`` ones,
    none of them ``*args``/``**kwargs``, and its source has one of the lines ``returns``;
    else why not (``values``: what those lines return, for the message)."""
    try:
        signature, source = _signature_and_source(fn)
    except (TypeError, ValueError, OSError) as error:
        return f"its source cannot be read ({type(error).__name__})"
    names = list(signature.parameters)
    if names[: len(first)] != list(first):
        return f"its first parameters are {names[: len(first)]}"
    unknown = [n for n in names if n not in known]
    if unknown:
        return f"it takes parameters this package does not know: {', '.join(unknown)}"
    kinds = {p.kind for p in signature.parameters.values()}
    if kinds - {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}:
        return "it takes *args or **kwargs"
    if not any(line in source for line in returns):
        return f"it does not return Liger's {values}"
    return None


@functools.lru_cache(maxsize=8)
def backward_recognised(fn: Callable) -> bool:
    """Whether ``fn`` is the Liger backward :func:`liger_head_op.scaled_gradients` stands for."""
    return backward_matches(fn, BACKWARD_PARAMETERS, all_of=BACKWARD_SOURCE)


@functools.lru_cache(maxsize=8)
def recognised(fn: Callable) -> str | None:
    """None where ``fn`` is a Liger forward this module knows, else why not."""
    return why_not_known(fn, TENSORS[:3], PARAMETERS, (RETURNS,), "seven values")


# ---------------------------------------------------------------- the redirect
def _constant(variable) -> tuple[bool, Any]:
    """(True, value) for a constant, or a symbolic int, float or bool, specialised with a
    guard (``dynamic=True`` makes a frame's int arguments symbolic, so Liger's
    ``ignore_index`` is one where its Function's forward is a frame of its own; its loop
    would specialise them too, as Triton constants); else (False, None)."""
    from torch._dynamo.variables import SymNodeVariable

    try:
        if variable.is_python_constant():
            return True, variable.as_python_constant()
        if isinstance(variable, SymNodeVariable):
            return True, variable.evaluate_expr()
    except Exception:  # noqa: BLE001  (not a constant; data-dependent)
        pass
    return False, None


def _plain(value) -> bool:
    import torch

    return value is None or isinstance(value, (bool, int, float, str, torch.dtype))


def opaque_call(fn, args, kwargs, chosen: str, promoted: Callable[[], bool]):
    """(tensor variables, options, present) for a call of Liger's forward that the op
    can take, or None where the loop is traced (with the reason counted).  ``promoted()``
    traces :func:`liger_head_op.loop_promoted` and gives its value."""
    import torch
    from torch._dynamo.variables import TensorVariable

    try:
        bound = _signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None
    values = dict(bound.arguments)
    tensors, scalars = {}, {}
    for name, variable in values.items():
        if name in TENSORS and isinstance(variable, TensorVariable):
            tensors[name] = variable
            continue
        constant, value = _constant(variable)
        if not constant or not _plain(value):
            count(COUNTED, "loop:not_constant")
            return None
        if name in TENSORS:
            if value is not None:
                count(COUNTED, "loop:not_constant")
                return None
            continue
        scalars[name] = str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else value
    if not all(n in tensors for n in TENSORS[:3]):
        return None
    example = tensors["_input"].as_proxy().node.meta.get("example_value")
    if example is None:
        return None
    weight = tensors["weight"].as_proxy().node.meta.get("example_value")
    defaults = {n: p.default for n, p in _signature(fn).parameters.items() if n not in values}
    merged = {**{k: v for k, v in defaults.items() if k not in TENSORS}, **scalars}
    if not all(_plain(v) for v in merged.values()):
        return None
    tier = "fixed"
    if chosen == "auto":
        chunks = liger_chunks(example.shape, weight.shape, merged.get("chunk_mem_const") or 1)
        breaking = [name for name in LOOP_BREAKING_OPTIONS if merged.get(name)]
        event = "opaque:long_loop"
        if chunks is None:
            tier, event = "symbolic", "opaque:symbolic"
        elif breaking:
            event = f"opaque:breaking_loop:{breaking[0]}"
        elif chunks <= LOOP_MAX_CHUNKS:
            if promoted():  # Dynamo guards on the flag read here
                count(COUNTED, "loop:promoted")
                return None
            tier, event = "static", "opaque:static"
        count(COUNTED, event)
    compute = merged.get("compute_gradients")
    weight_grad = merged.get("weight_requires_grad")
    grads = {
        "input": bool(example.requires_grad if compute is None else compute),
        "weight": bool(weight.requires_grad if weight_grad is None else weight_grad),
    }
    present = (
        True, bool(merged.get("return_z_loss")), bool(merged.get("return_token_accuracy")),
        bool(merged.get("return_predicted_tokens")), True, grads["input"] and grads["weight"],
        grads["input"] and "bias" in tensors,
    )  # fmt: skip
    options = {"module": fn.__module__, "kwargs": scalars, "grads": grads, "present": present,
               "per_token": merged.get("reduction") == "none", "tier": tier,
               "autocast": autocast_state(example.device)}  # fmt: skip
    if merged.get("use_token_scaling"):
        why_not = liger_token_scaling.why_not(fn)
        options["sync_free"] = why_not is None
        # another Liger's source (one that computes the factors another way) runs as it is
        count(COUNTED, "token_scaling:sync_free" if why_not is None else "token_scaling:as_liger_writes_it")
    return [tensors.get(n) for n in TENSORS], json.dumps(options, sort_keys=True), present


def _token_scaling(fn, args, kwargs) -> bool:
    """Whether a traced call of Liger's forward passes ``use_token_scaling`` as a true constant."""
    try:
        variable = _signature(fn).bind(*args, **kwargs).arguments.get("use_token_scaling")
    except TypeError:
        return False
    constant, value = _constant(variable) if variable is not None else (False, None)
    return constant and bool(value)


def liger_chunks(input_shape, weight_shape, chunk_mem_const: int = 1) -> int | None:
    """How many chunks Liger's loop runs (its formula), or None where a size is symbolic."""
    rows, hidden = input_shape[0], input_shape[-1]
    vocab = weight_shape[0]
    if not all(isinstance(n, int) for n in (rows, hidden, vocab)) or rows < 1:
        return None
    inc_factor = -(-vocab // (chunk_mem_const * hidden))  # Liger's name: logits of a chunk ~ BT x H
    size = 1
    while size < -(-rows // inc_factor):
        size *= 2
    size = min(size, rows)
    return -(-rows // size)


def redirect(stock: Callable[..., Any]) -> Callable[..., Any]:
    """``UserFunctionVariable.call_function`` that traces :func:`opaque_forward` where
    ``self.fn`` is Liger's forward and the call qualifies, and
    :func:`liger_head_op.scaled_gradients` where it is Liger's backward inlined with its
    Function (see the module docstring)."""
    from torch._dynamo.variables import ConstantVariable
    from torch._dynamo.variables.functions import UserFunctionVariable

    def call_function(self, tx, args, kwargs):
        fn = getattr(self, "fn", None)

        def promoted() -> bool:
            flag = call_function.stock(UserFunctionVariable(liger_head_op.loop_promoted), tx, [], {})
            return bool(flag.as_python_constant())

        if liger_distill_head.forward_of(fn) is not None or liger_distill_head.is_backward(fn):
            variable = liger_distill_head.traced(self, tx, args, kwargs, mode(), call_function.stock, _warn_once, promoted)
            if variable is not None:
                return variable
        if is_liger_backward(fn) and mode() != "loop" and not _a_frame_of_its_own(tx, fn):
            if backward_recognised(fn):
                count(COUNTED, "backward")
                liger_head_op.scaled_gradient_op()  # registered before Dynamo traces a call of it
                return call_function.stock(UserFunctionVariable(liger_head_op.scaled_gradients), tx, args, kwargs)
            count(COUNTED, "backward:unrecognised")
        if is_liger_forward(fn):
            chosen = mode()
            why_not = recognised(fn)
            if why_not is not None:
                _warn_once(f"unknown:{why_not}", f"inductor_addmm_fix: Liger's {FUNCTION} is not one this package "
                           f"recognises ({why_not}): its chunk loop is compiled as Dynamo traces it")  # fmt: skip
            elif chosen != "loop":
                call = opaque_call(fn, args, kwargs, chosen, promoted)
                if call is not None:
                    tensors, options, present = call
                    liger_flce_forward()  # registered before Dynamo traces a call of it
                    count(COUNTED, "opaque")
                    new_args = [t if t is not None else ConstantVariable.create(None) for t in tensors]
                    new_args += [ConstantVariable.create(options), ConstantVariable.create(present)]
                    return call_function.stock(UserFunctionVariable(opaque_forward), tx, new_args, {})
            else:
                count(COUNTED, "loop:setting")
            # Liger's boolean-mask block would break the graph in the loop: the loop without it
            rewritten = liger_token_scaling.without_host_syncs(fn) if why_not is None and _token_scaling(fn, args, kwargs) else fn
            if rewritten is not fn:
                count(COUNTED, "loop:token_scaling:sync_free")
                return call_function.stock(UserFunctionVariable(rewritten), tx, args, kwargs)
        return call_function.stock(self, tx, args, kwargs)

    call_function.stock = stock  # type: ignore[attr-defined]
    call_function.splices = True  # type: ignore[attr-defined]  (calls through .stock: see slots.wrapper_over)
    return call_function


def plan() -> list[Decision]:
    import torch
    from torch._dynamo.variables.functions import UserFunctionVariable

    require(callable(vars(UserFunctionVariable).get("call_function")), "UserFunctionVariable.call_function")
    require(hasattr(torch.library, "register_fake"), "torch.library.register_fake")
    slot = Attribute(UserFunctionVariable, "call_function", "torch._dynamo.variables.functions.UserFunctionVariable")
    reason = (
        "Dynamo unrolls Liger FLCE's chunk loop and guards on its count: with changing lengths every new count "
        "compiles the loop again; its backward branches on data, which breaks the graph at its Function"
    )
    return [needed(NAME, reason, [Patch(NAME, slot, redirect)], probe="dynamo.liger_head.plan", obsolete_when=RETIRED_BY)]
