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
eager's memory and results (the same code on the same inputs).  Liger is not changed
on disk or in memory, and eager code never sees this: only Dynamo's inlining is
redirected.

Which calls, ``INDUCTOR_ADDMM_FIX_LIGER_HEAD``:

* ``auto`` (default): the loop compiled where the token count is static and Liger runs
  at most :data:`LOOP_MAX_CHUNKS` chunks (Llama-like heads, V / H up to about 32: a
  static graph serves every step of its length, and the package's passes make the loop
  faster than eager), the opaque op elsewhere: where the token count is symbolic
  (changing lengths after Dynamo's automatic dynamic shapes, ``dynamic=True``,
  ``mark_dynamic``), and where the loop is longer (small hidden sizes with large
  vocabularies: 64-148 chunks, whose unrolled compile costs more than a plain cross
  entropy's whole model, and is paid again by the first step of a run whose lengths
  change);
* ``loop``: always the loop (compiled as Dynamo traces it);
* ``opaque``: always the opaque op (the shortest compile, eager's speed for the head).

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

NAME = "dynamo.liger_flce_forward_opaque"
RETIRED_BY = "none known: Dynamo unrolls Liger's chunk loop and guards on the chunk count"
COUNTED = "liger_head"  # counters["inductor_addmm_fix"]["liger_head:<event>"]

MODULE = "liger_kernel.ops.fused_linear_cross_entropy"
FUNCTION = "fused_linear_cross_entropy_forward"
OP = "inductor_addmm_fix::liger_flce_forward"
VARIABLE = LIGER_HEAD.variable
MODES = LIGER_HEAD_MODES
#: ``auto``: the longest loop compiled in a static graph (the chunks of one call)
LOOP_MAX_CHUNKS = 32

#: Liger's parameters that hold tensors (or None), in the op's order.
TENSORS = ("_input", "weight", "target", "ce_weight", "bias", "token_grad_output")
#: Every parameter of the forward this module knows (0.8.1-0.8.5 and the nightly).
PARAMETERS = frozenset(TENSORS) | {
    "ignore_index", "lse_square_scale", "label_smoothing", "reduction", "softcap", "return_z_loss",
    "accum_dtype", "use_token_scaling", "return_token_accuracy", "return_predicted_tokens", "ce_impl",
    "ce_mode", "compute_gradients", "weight_requires_grad", "chunk_mem_const",
}  # fmt: skip
#: What the forward returns, as its source writes it.
RETURNS = "return loss, z_loss, token_accuracy, predicted_tokens, grad_input, grad_weight, grad_bias"
OUTPUTS = ("loss", "z_loss", "token_accuracy", "predicted_tokens", "grad_input", "grad_weight", "grad_bias")

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
    from ..installer import warn_once

    warn_once(f"liger_head:{key}", message)


# ---------------------------------------------------------------- recognising Liger's forward
def is_liger_forward(fn: Any) -> bool:
    return getattr(fn, "__name__", None) == FUNCTION and getattr(fn, "__module__", None) == MODULE


@functools.lru_cache(maxsize=8)
def _signature(fn: Callable) -> inspect.Signature:
    return inspect.signature(fn)


@functools.lru_cache(maxsize=8)
def recognised(fn: Callable) -> str | None:
    """None where ``fn`` is a Liger forward this module knows, else why not."""
    try:
        signature = _signature(fn)
        source = inspect.getsource(fn)
    except (TypeError, ValueError, OSError) as error:
        return f"its source cannot be read ({type(error).__name__})"
    names = list(signature.parameters)
    if names[:3] != ["_input", "weight", "target"]:
        return f"its first parameters are {names[:3]}"
    unknown = [n for n in names if n not in PARAMETERS]
    if unknown:
        return f"it takes parameters this package does not know: {', '.join(unknown)}"
    kinds = {p.kind for p in signature.parameters.values()}
    if kinds - {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}:
        return "it takes *args or **kwargs"
    if RETURNS not in " ".join(source.split()):
        return "it does not return Liger's seven values"
    return None


# ---------------------------------------------------------------- the op
@functools.lru_cache(maxsize=None)
def _options(text: str) -> dict:
    return json.loads(text)


def _dtype(name: str | None):
    import torch

    return None if name is None else getattr(torch, name)


def _kwargs(options: dict) -> dict:
    kwargs = dict(options["kwargs"])
    if "accum_dtype" in kwargs:
        kwargs["accum_dtype"] = _dtype(kwargs["accum_dtype"])
    return kwargs


def _expected(options: dict, _input, weight, bias) -> list:
    """(shape, dtype) of each output, None where Liger returns None."""
    import torch

    rows = _input.shape[0]
    present = options["present"]
    scalar_or_rows = (rows,) if options["per_token"] else ()
    shapes = [
        (scalar_or_rows, torch.float32),
        (scalar_or_rows, _input.dtype),
        (scalar_or_rows, torch.float32),
        ((rows,), torch.int64),
        (tuple(_input.shape), _input.dtype),
        (tuple(weight.shape), weight.dtype),
        (tuple(bias.shape), bias.dtype) if bias is not None else None,
    ]
    return [shape if there else None for shape, there in zip(shapes, present)]


def _run_liger(_input, weight, target, ce_weight, bias, token_grad_output, options: str):
    """The op's kernel: Liger's forward, as Liger's autograd.Function runs it (grad mode
    off; the inputs' ``requires_grad`` as they were when the graph was traced)."""
    import importlib

    import torch

    chosen = _options(options)
    forward = getattr(importlib.import_module(chosen["module"]), FUNCTION)
    tensors = dict(zip(TENSORS, (_input, weight, target, ce_weight, bias, token_grad_output)))
    tensors["_input"] = _input.detach().requires_grad_(chosen["grads"]["input"])
    tensors["weight"] = weight.detach().requires_grad_(chosen["grads"]["weight"])
    tensors = {k: v for k, v in tensors.items() if k in _signature(forward).parameters}
    count(COUNTED, "run")  # each run of the op (the events above are counted while Dynamo traces)
    with torch.no_grad():
        outputs = forward(**tensors, **_kwargs(chosen))
    expected = _expected(chosen, _input, weight, bias)
    result = []
    for name, value, want in zip(OUTPUTS, outputs, expected):
        got = None if value is None else (tuple(value.shape), value.dtype)
        if got != want:
            raise RuntimeError(
                f"inductor_addmm_fix: Liger's {FUNCTION} returned {name} as {got}, where the compiled graph "
                f"expects {want}; run with {VARIABLE}=loop and report it"
            )
        result.append(_input.new_empty(0) if value is None else value)
    return result


def _fake(_input, weight, target, ce_weight, bias, token_grad_output, options: str):
    chosen = _options(options)
    return [
        _input.new_empty(0) if want is None else _input.new_empty(want[0], dtype=want[1])
        for want in _expected(chosen, _input, weight, bias)
    ]


@functools.lru_cache(maxsize=None)
def liger_flce_forward():
    """``torch.ops.inductor_addmm_fix.liger_flce_forward``, registered at first use."""
    import torch

    namespace, name = OP.split("::")
    if not hasattr(getattr(torch.ops, namespace), name):
        schema = ("(Tensor _input, Tensor weight, Tensor target, Tensor? ce_weight, Tensor? bias, "
                  "Tensor? token_grad_output, str options) -> Tensor[]")  # fmt: skip
        # Liger's forward reads a count with .item(): CUDA graphs capture around it
        unsafe = getattr(torch.Tag, "cudagraph_unsafe", None)
        torch.library.define(OP, schema, tags=(unsafe,) if unsafe is not None else ())
        torch.library.impl(OP, "CompositeExplicitAutograd")(_run_liger)
        torch.library.register_fake(OP)(_fake)
    return getattr(getattr(torch.ops, namespace), name).default


def opaque_forward(_input, weight, target, ce_weight, bias, token_grad_output, options, present):
    """What Dynamo traces in place of Liger's forward: the op, and None where Liger
    returns None."""
    import torch

    out = torch.ops.inductor_addmm_fix.liger_flce_forward(_input, weight, target, ce_weight, bias, token_grad_output, options)
    return (
        out[0],
        out[1] if present[1] else None,
        out[2] if present[2] else None,
        out[3] if present[3] else None,
        out[4],
        out[5] if present[5] else None,
        out[6] if present[6] else None,
    )


# ---------------------------------------------------------------- the redirect
def _constant(variable) -> tuple[bool, Any]:
    try:
        if variable.is_python_constant():
            return True, variable.as_python_constant()
    except Exception:  # noqa: BLE001  (not a constant)
        pass
    return False, None


def _plain(value) -> bool:
    import torch

    return value is None or isinstance(value, (bool, int, float, str, torch.dtype))


def opaque_call(fn, args, kwargs, chosen: str):
    """(tensor variables, options, present) for a call of Liger's forward that the op
    can take, or None where the loop is traced (with the reason counted)."""
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
    if chosen == "auto":
        chunks = liger_chunks(example.shape, weight.shape, merged.get("chunk_mem_const") or 1)
        if chunks is not None and chunks <= LOOP_MAX_CHUNKS:
            count(COUNTED, "loop:static")
            return None
        count(COUNTED, "opaque:symbolic" if chunks is None else "opaque:long_loop")
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
               "per_token": merged.get("reduction") == "none"}  # fmt: skip
    return [tensors.get(n) for n in TENSORS], json.dumps(options, sort_keys=True), present


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
    ``self.fn`` is Liger's forward and the call qualifies (see the module docstring)."""
    from torch._dynamo.variables import ConstantVariable
    from torch._dynamo.variables.functions import UserFunctionVariable

    def call_function(self, tx, args, kwargs):
        fn = getattr(self, "fn", None)
        if is_liger_forward(fn):
            chosen = mode()
            why_not = recognised(fn)
            if why_not is not None:
                _warn_once(f"unknown:{why_not}", f"inductor_addmm_fix: Liger's {FUNCTION} is not one this package "
                           f"recognises ({why_not}): its chunk loop is compiled as Dynamo traces it")  # fmt: skip
            elif chosen != "loop":
                call = opaque_call(fn, args, kwargs, chosen)
                if call is not None:
                    tensors, options, present = call
                    liger_flce_forward()  # registered before Dynamo traces a call of it
                    count(COUNTED, "opaque")
                    new_args = [t if t is not None else ConstantVariable.create(None) for t in tensors]
                    new_args += [ConstantVariable.create(options), ConstantVariable.create(present)]
                    return call_function.stock(UserFunctionVariable(opaque_forward), tx, new_args, {})
            else:
                count(COUNTED, "loop:setting")
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
        "compiles the loop again"
    )
    return [needed(NAME, reason, [Patch(NAME, slot, redirect)], probe="dynamo.liger_head.plan", obsolete_when=RETIRED_BY)]
