"""The op that stands for Liger FLCE's forward in a compiled graph, and when a static
graph trades it, or the op of Liger's JSD and KL-div (``dynamo/liger_distill_head.py``),
for Liger's loop.

``inductor_addmm_fix::liger_flce_forward`` runs Liger's own forward (its kernel) and
gives its outputs' shapes (its fake kernel); ``dynamo/liger_head.py`` decides where
Dynamo traces it and builds its ``options``.

Tiers (``INDUCTOR_ADDMM_FIX_LIGER_HEAD=auto``): a static graph whose loop is short enough
to compile starts with the op too, and reads :func:`loop_promoted` while Dynamo traces
it, so Dynamo guards on that flag.  The ops count their runs by tier (:func:`record_run`,
one count for both); once one static shape has run :data:`PROMOTE_AFTER` times and no graph with a symbolic token count has
run the head (the lengths do not change), the flag is set, the guard fails, and Dynamo
compiles that graph again with Liger's loop, which the package's passes make faster
than eager.  A run whose lengths change never pays for compiling the loop: its
symbolic graph runs the op from the second step on.  Nothing is promoted where a
recompile would raise (``torch._dynamo.config.error_on_recompile``, the
``fail_on_recompile`` stance).
"""

from __future__ import annotations

import functools
import inspect
import json
from typing import Callable

from ..patching.counters import count
from ..settings import LIGER_HEAD
from . import liger_token_scaling

MODULE = "liger_kernel.ops.fused_linear_cross_entropy"
FUNCTION = "fused_linear_cross_entropy_forward"
BACKWARD = "fused_linear_cross_entropy_backward"
#: Liger's backward as this module knows it (0.8.1 through 0.8.5 and the nightly): its
#: parameters, and the lines that skip the scaling at 1.0 and return the three gradients
BACKWARD_PARAMETERS = ["grad_output", "grad_input", "grad_weight", "grad_bias"]
BACKWARD_SOURCE = ("if not torch.equal(grad_output, torch.tensor(1.0, device=grad_output.device)):",
                   "return grad_input, grad_weight, grad_bias")  # fmt: skip
OP = "inductor_addmm_fix::liger_flce_forward"
COUNTED = "liger_head"  # counters["inductor_addmm_fix"]["liger_head:<event>"]
VARIABLE = LIGER_HEAD.variable

#: Liger's parameters that hold tensors (or None), in the op's order.
TENSORS = ("_input", "weight", "target", "ce_weight", "bias", "token_grad_output")
OUTPUTS = ("loss", "z_loss", "token_accuracy", "predicted_tokens", "grad_input", "grad_weight", "grad_bias")

#: runs of one static shape, in a process whose lengths have not changed, after which
#: static graphs compile Liger's loop
PROMOTE_AFTER = 4
_PROMOTED = False
_static_runs: dict = {}
_symbolic_ran = False


@functools.lru_cache(maxsize=8)
def signature(fn: Callable) -> inspect.Signature:
    return inspect.signature(fn)


# ---------------------------------------------------------------- tiers
def loop_promoted() -> bool:
    """Whether static graphs compile Liger's loop: Dynamo inlines this function while it
    traces a static graph under ``auto``, and guards on the global it returns."""
    return _PROMOTED


def reset_tiers() -> None:
    """Forget the runs counted and the promotion (a fresh process's state)."""
    global _PROMOTED, _symbolic_ran
    _PROMOTED, _symbolic_ran = False, False
    _static_runs.clear()


def _may_recompile() -> bool:
    import torch

    if getattr(torch._dynamo.config, "error_on_recompile", False):
        return False
    stance = getattr(getattr(torch._dynamo, "eval_frame", None), "_stance", None)
    return getattr(stance, "stance", "default") != "fail_on_recompile"


def record_run(tier: str, shape: tuple) -> None:
    """One run of an op (FLCE's or the distillation losses'), of ``options["tier"]``
    and keyed by ``shape``: ``static`` graphs count towards
    promotion, ``symbolic`` ones stop it, ``fixed`` ones (a long loop, the ``opaque``
    setting) do neither."""
    global _PROMOTED, _symbolic_ran
    if tier == "symbolic":
        _symbolic_ran = True
    if tier != "static" or _PROMOTED:
        return
    _static_runs[shape] = _static_runs.get(shape, 0) + 1
    if not _symbolic_ran and len(_static_runs) == 1 and _static_runs[shape] >= PROMOTE_AFTER and _may_recompile():
        _PROMOTED = True
        count(COUNTED, "promoted")


# ---------------------------------------------------------------- autocast
def autocast_state(device) -> list | None:
    """``[device type, dtype name]`` of the autocast region active for ``device`` while
    Dynamo traces a call of Liger's forward (Dynamo enters a region the compiled code opens
    while it traces it), or None outside one.  Recorded in the op's options: the compiled
    graph runs its ops with autocast off (AOTAutograd applied it when it traced them), and
    the op's kernel, Liger's forward, must run inside the region as eager runs it (its
    Function's ``custom_fwd`` keeps the caller's region)."""
    import torch

    kind = device.type
    try:
        if not torch.is_autocast_enabled(kind):
            return None
        return [kind, str(torch.get_autocast_dtype(kind)).removeprefix("torch.")]
    except (TypeError, RuntimeError):  # a device type autocast does not know
        return None


def autocast_as_traced(options: dict):
    """The autocast region ``options["autocast"]`` records (see :func:`autocast_state`),
    or none."""
    import contextlib

    import torch

    state = options.get("autocast")
    if state is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=state[0], dtype=getattr(torch, state[1]))


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
    off; the inputs' ``requires_grad`` as they were when the graph was traced); with
    token scaling, Liger's forward without its host syncs (``options["sync_free"]``,
    ``dynamo/liger_token_scaling.py``), bit for bit the same results."""
    import importlib

    import torch

    chosen = _options(options)
    forward = getattr(importlib.import_module(chosen["module"]), FUNCTION)
    if chosen.get("sync_free"):
        forward = liger_token_scaling.without_host_syncs(forward)
    tensors = dict(zip(TENSORS, (_input, weight, target, ce_weight, bias, token_grad_output)))
    tensors["_input"] = _input.detach().requires_grad_(chosen["grads"]["input"])
    tensors["weight"] = weight.detach().requires_grad_(chosen["grads"]["weight"])
    tensors = {k: v for k, v in tensors.items() if k in signature(forward).parameters}
    count(COUNTED, "run")  # each run of the op (the other events are counted while Dynamo traces)
    record_run(chosen.get("tier", "fixed"), (tuple(_input.shape), tuple(weight.shape)))
    with torch.no_grad(), autocast_as_traced(chosen):
        outputs = forward(**tensors, **_kwargs(chosen))
    return checked_outputs(FUNCTION, OUTPUTS, outputs, _expected(chosen, _input, weight, bias), _input)


def checked_outputs(function: str, names, outputs, expected: list, like) -> list:
    """``outputs`` of Liger's ``function`` as the op returns them (an empty tensor like
    ``like`` for None), after checking each against the (shape, dtype) the compiled graph
    was traced for (``expected``; None where Liger returns None): where one differs, the
    op raises and names the setting that avoids it."""
    result = []
    for name, value, want in zip(names, outputs, expected):
        got = None if value is None else (tuple(value.shape), value.dtype)
        if got != want:
            raise RuntimeError(
                f"inductor_addmm_fix: Liger's {function} returned {name} as {got}, where the compiled graph "
                f"expects {want}; run with {VARIABLE}=loop and report it"
            )
        result.append(like.new_empty(0) if value is None else value)
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


# ---------------------------------------------------------------- the backward
SCALED = "inductor_addmm_fix::scaled_gradient"
#: the same product written into the gradient (what the lowering calls on a donated buffer)
SCALE_IN_PLACE = "inductor_addmm_fix::scale_gradient_"
#: the element types the CUDA kernel of :data:`SCALE_IN_PLACE` takes
_KERNEL_DTYPES = ("bfloat16", "float16", "float32")


def _scaled(grad, grad_output):
    """``grad`` times the 0-dim ``grad_output``, the product in float32 (or ``grad``'s
    wider dtype), stored in ``grad``'s dtype: what Liger's ``element_mul_kernel`` writes
    (at 1.0, ``grad`` unchanged, bit for bit)."""
    import torch

    wide = torch.promote_types(grad.dtype, torch.float32)
    return (grad.to(wide) * grad_output.to(wide)).to(grad.dtype)


def _scale_in_place(grad, grad_output) -> None:
    """:data:`SCALE_IN_PLACE` with torch's ops; on the CPU nothing written at 1.0 (reading
    the factor costs no sync there)."""
    if grad_output.device.type == "cpu" and grad_output.item() == 1.0:
        return
    grad.copy_(_scaled(grad, grad_output))


def _scale_in_place_cuda(grad, grad_output) -> None:
    """:data:`SCALE_IN_PLACE` on CUDA: a kernel that reads ``grad_output`` on the device and
    reads and writes nothing at 1.0, where Liger's backward skips its product after a host
    sync (``scale_in_place_triton``); torch's ops for a strided gradient or another dtype."""
    if grad.is_contiguous() and str(grad.dtype).removeprefix("torch.") in _KERNEL_DTYPES and grad.numel():
        try:
            from . import scale_in_place_triton
        except ImportError:  # no Triton: torch's ops
            pass
        else:
            scale_in_place_triton.launch(grad, grad_output)
            return
    _scale_in_place(grad, grad_output)


def _donated_and_read_once(grad) -> bool:
    """Whether ``grad`` (a lowering's argument) is a saved tensor AOTAutograd donated to
    this backward, read only by the node being lowered, and not in a CUDA graph (a
    mutated input keeps Inductor from capturing the graph)."""
    from torch._inductor import config, ir
    from torch._inductor.virtualized import V

    donated = getattr(ir, "DonatedBuffer", None)
    storage = getattr(grad, "data", None)
    if donated is None or not isinstance(storage, ir.StorageBox) or not isinstance(storage.data, donated):
        return False
    node = getattr(V.graph, "current_node", None)
    source = node.args[0] if node is not None and node.args else None
    return getattr(source, "op", None) == "placeholder" and len(source.users) == 1 and not config.triton.cudagraphs


def _lower_scaled(grad, grad_output):
    """Inductor's lowering of :data:`SCALED`.  Where ``grad`` is a donated saved tensor
    that nothing else reads: :data:`SCALE_IN_PLACE` on its buffer, which is the op's
    result (on CUDA nothing read or written at 1.0).  Elsewhere the same product as one
    pointwise kernel, which Inductor writes into ``grad``'s buffer where ``grad`` dies
    here."""
    import torch
    from torch._inductor import lowering

    if _donated_and_read_once(grad):
        count(COUNTED, "scale:in_place")
        lowering.fallback_handler(scale_in_place_op(), add_to_fallback_set=False)(grad, grad_output)
        return grad
    count(COUNTED, "scale:pointwise")
    wide = torch.promote_types(grad.get_dtype(), torch.float32)
    product = lowering.lowerings[torch.ops.aten.mul.Tensor](lowering.to_dtype(grad, wide), lowering.to_dtype(grad_output, wide))
    return lowering.to_dtype(product, grad.get_dtype())


@functools.lru_cache(maxsize=None)
def scale_in_place_op():
    """``torch.ops.inductor_addmm_fix.scale_gradient_``, registered at first use."""
    import torch

    namespace, name = SCALE_IN_PLACE.split("::")
    if not hasattr(getattr(torch.ops, namespace), name):
        torch.library.define(SCALE_IN_PLACE, "(Tensor(a!) grad, Tensor grad_output) -> ()")
        torch.library.impl(SCALE_IN_PLACE, "CompositeExplicitAutograd")(_scale_in_place)
        torch.library.impl(SCALE_IN_PLACE, "CUDA")(_scale_in_place_cuda)
        torch.library.register_fake(SCALE_IN_PLACE)(lambda grad, grad_output: None)
    return getattr(getattr(torch.ops, namespace), name).default


@functools.lru_cache(maxsize=None)
def scaled_gradient_op():
    """``torch.ops.inductor_addmm_fix.scaled_gradient``, and its Inductor lowering,
    registered at first use (before Dynamo traces :func:`scaled_gradients`)."""
    import torch
    from torch._inductor import lowering

    namespace, name = SCALED.split("::")
    if not hasattr(getattr(torch.ops, namespace), name):
        torch.library.define(SCALED, "(Tensor grad, Tensor grad_output) -> Tensor")
        torch.library.impl(SCALED, "CompositeExplicitAutograd")(_scaled)
        torch.library.register_fake(SCALED)(lambda grad, grad_output: torch.empty_like(grad))
    scale_in_place_op()
    op = getattr(getattr(torch.ops, namespace), name).default
    if op not in lowering.lowerings:
        lowering.register_lowering(op, type_promotion_kind=None)(_lower_scaled)
    return op


def scaled_gradients(grad_output, grad_input, grad_weight, grad_bias):
    """What Dynamo traces in place of Liger's ``fused_linear_cross_entropy_backward``:
    each saved gradient times ``grad_output``, the product in float32 (or the gradient's
    wider dtype) stored in the gradient's dtype, as Liger's ``element_mul_kernel`` writes
    it (and, at 1.0, the gradient unchanged, bit for bit, as Liger's skip leaves it).
    Liger branches on ``torch.equal(grad_output, 1.0)``, a data-dependent test that
    breaks the graph at its autograd Function; this has no branch.  Callers register the
    op first (:func:`scaled_gradient_op`).

    Each product is one op, :data:`SCALED`.  Inductor lowers it, where the gradient is a
    saved tensor AOTAutograd donates to the backward and nothing else reads, to
    :data:`SCALE_IN_PLACE` on that buffer: on CUDA a kernel that tests ``grad_output`` on
    the device and does nothing at 1.0, as Liger's skip does without its host sync (the
    pointwise product rewrote the 1 GiB weight gradient of a Llama-3-8B head: KL-div's op
    rows ran 1-3 % slower than eager on an H100, 0.98-0.99x with the kernel); elsewhere
    to the pointwise product.  One op rather than torch's ops, for two reasons:

    - The partitioner weighs a tensor that only fusible ops read at twice its size
      (``is_materialized``). With ``grad.to(float32) * grad_output`` in the backward, a
      promoted Liger loop's rounded weight gradient counted twice, and where its chunks'
      gradients weigh less than that (JSD's student on the Llama-3-8B head: 1.05 GB
      against 2 x 0.53 GB), the partitioner saved every chunk's gradient and moved the
      whole accumulation into the backward: 2.3 GiB over eager on an H100.  An op the
      partitioner does not fuse makes it weigh the gradient at its size.
    - No cast of the gradient appears in the joint graph: a compiled Liger loop ends with
      ``grad_weight = accumulator.to(weight.dtype)``, and a ``.to(float32)`` of that
      makes a narrowing-then-widening chain that Inductor's ``pointless_convert``
      collapses on torch 2.8-2.12 (kept since PR #184366, torch 2.13): the backward
      would read the float32 accumulator, a product eager does not compute."""
    import torch

    def scaled(grad):
        return None if grad is None else torch.ops.inductor_addmm_fix.scaled_gradient(grad, grad_output)

    return scaled(grad_input), scaled(grad_weight), scaled(grad_bias)
