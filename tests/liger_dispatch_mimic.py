"""Liger-Kernel 0.8.5's ``liger_kernel.backends.dispatch`` in miniature, for the CPU: a
``dispatch`` wrapped in ``torch.compiler.disable`` that resolves an implementation
(``resolve_impl``) and calls its ``forward``, one registered implementation of
``kl_loss_and_grad`` in pure torch, and a KL-div chunk loop that calls it per chunk as
Liger's ``fused_linear_kl_div_forward`` does (the loss rows and the logits' gradient of
each chunk from the dispatched kernel, the weight gradient accumulated).

:func:`helpers.liger_mimic` imports this file under Liger's module name, which is what
the package recognises.
"""

import torch


class OpImpl:
    def __init__(self, forward, autograd_function=None):
        self.forward = forward
        self.autograd_function = autograd_function

    def call(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


def kl_loss_and_grad(logits, target, scale, *, mode=None):
    """Per-row KL(target || softmax(logits)) times ``scale``, and its gradient
    with respect to the logits (what Liger's Triton kernel writes)."""
    up = logits.to(torch.promote_types(logits.dtype, torch.float32))  # Liger's kernel computes in fp32
    log_q = torch.log_softmax(up, dim=-1)
    rows = (target * (torch.log(target.clamp_min(1e-10)) - log_q)).sum(-1) * scale
    grad = (torch.softmax(up, dim=-1) * target.sum(-1, keepdim=True) - target) * scale
    return rows, grad.to(logits.dtype)


REGISTRY = {"kl_loss_and_grad": OpImpl(kl_loss_and_grad)}
CALLS = []  # the op names dispatch() was called with, eagerly


def resolve_impl(op_name, requested=None, device=None):
    if op_name not in REGISTRY:
        raise RuntimeError(f"No implementation available for op {op_name!r}")
    return REGISTRY[op_name]


@torch.compiler.disable
def dispatch(op_name, *args, impl=None, backend=None, **kwargs):
    CALLS.append(op_name)
    return resolve_impl(op_name, requested=impl or backend, device=None).call(*args, **kwargs)


def chunked_kl(x, w, target, chunk=8, op="kl_loss_and_grad", impl=None):
    """Liger's loop: KL-div (batchmean) of ``softmax(x @ w.t())`` against ``target``, with
    the input and weight gradients, chunk by chunk through ``dispatch``."""
    rows = x.shape[0]
    scale = 1.0 / rows
    loss_rows = torch.zeros(rows, dtype=torch.float32)
    grad_x = torch.zeros_like(x)
    grad_w = torch.zeros_like(w)
    for start in range(0, rows, chunk):
        end = min(start + chunk, rows)
        logits = x[start:end] @ w.t()
        loss, grad_logits = dispatch(op, logits, target[start:end], scale, impl=impl, mode=None)
        loss_rows[start:end] = loss
        grad_x[start:end] = grad_logits @ w
        grad_w.addmm_(grad_logits.t(), x[start:end])
    return loss_rows.sum(), grad_x, grad_w
