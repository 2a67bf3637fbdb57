"""Liger-Kernel 0.8.5's fused linear JSD and KL-div in pure torch, for the CPU.

One file holds both modules' functions, with Liger's names, parameters and return lines:
``fused_linear_jsd_forward`` / ``fused_linear_jsd_backward`` /
``LigerFusedLinearJSDFunction`` and ``fused_linear_kl_div_forward`` /
``fused_linear_kl_div_backward`` / ``LigerFusedLinearKLDIVFunction``.  Each forward runs
Liger's chunk loop (``chunk_size = next_power_of_2(cdiv(BT, cdiv(V, H)))``), reads the
non-ignored count with ``.item()``, calls its per-chunk kernel by name through Liger's
``dispatch`` (``torch.compiler.disable``'d: Dynamo breaks the graph there; the mimic of
``tests/liger_dispatch_mimic.py``, which must be imported as Liger's dispatch module
first), and accumulates the weight gradient chunk by chunk; each backward scales the
saved gradients where ``grad_output`` is not 1.0 (a data-dependent test, in Liger's two
spellings).  The kernels compute in float32 and write what Liger's Triton kernels write.

``tests/helpers.liger_mimic`` imports this file under Liger's module names
(``liger_kernel.ops.fused_linear_jsd`` and ``liger_kernel.ops.fused_linear_kl_div``),
which is what the package recognises.
"""

import sys

import torch
from liger_flce_mimic import _cdiv, _next_power_of_2

_DISPATCH = "liger_kernel.backends.dispatch"


def _chunks(BT, H, V):
    inc_factor = _cdiv(V, H)
    chunk_size = min(_next_power_of_2(_cdiv(BT, inc_factor)), BT)
    return chunk_size, _cdiv(BT, chunk_size)


def _gradient_buffers(student_input, student_weight, accum_dtype):
    """Liger's zeroed weight gradient (None where the weight takes none; ``accum_dtype``
    where given) and input gradient."""
    grad_weight = None
    if student_weight.requires_grad:
        grad_weight = torch.zeros_like(student_weight, dtype=accum_dtype or student_weight.dtype)
    return grad_weight, torch.zeros_like(student_input)


# Liger's ``from liger_kernel.backends import dispatch``: its ``torch.compiler.disable``'d
# dispatcher (here the mimic of tests/liger_dispatch_mimic.py, where this module
# registers its kernels at the end)
dispatch = sys.modules[_DISPATCH].dispatch


def _scale_in_place(grad_output, *grads):
    # Liger: element_mul_kernel, in place: the product in float32 stored in the tensor's dtype
    for grad in grads:
        if grad is not None:
            grad.copy_((grad.to(torch.promote_types(grad.dtype, torch.float32)) * grad_output).to(grad.dtype))


# ---------------------------------------------------------------- JSD
def jsd_loss_and_grad(student_logp, teacher_logp, labels, beta, ignore_index, n_non_ignore):
    """Per-element generalised JSD of two log-probability rows over ``n_non_ignore``, and
    its gradient with respect to the student's log-probabilities."""
    p, q = teacher_logp.exp(), student_logp.exp()
    if beta == 0.0:
        loss = p * (teacher_logp - student_logp)
        grad = -p
    elif beta == 1.0:
        loss = q * (student_logp - teacher_logp)
        grad = q * (student_logp - teacher_logp + 1)
    else:
        m = beta * p + (1 - beta) * q
        log_m = m.log()
        loss = beta * p * (teacher_logp - log_m) + (1 - beta) * q * (student_logp - log_m)
        grad = (1 - beta) * q * (student_logp - log_m)
    if labels is not None:
        keep = (labels != ignore_index).unsqueeze(1)
        loss, grad = loss * keep, grad * keep
    return loss / n_non_ignore, grad / n_non_ignore


def fused_linear_jsd_forward(
    student_input,
    student_weight,
    teacher_input,
    teacher_weight,
    shift_labels,
    jsd_beta,
    ignore_index,
    has_label,
    temperature,
    jsd_impl=None,
    jsd_mode=None,
    accum_dtype=None,
):
    dtype = student_input.dtype
    BT, H = student_input.shape
    V = student_weight.shape[0]
    chunk_size, num_chunks = _chunks(BT, H, V)
    grad_weight, grad_input = _gradient_buffers(student_input, student_weight, accum_dtype)
    total_loss = torch.zeros((), dtype=torch.float32, device=student_input.device)
    n_non_ignore = (shift_labels != ignore_index).sum().item() if has_label else BT
    for chunk_id in range(num_chunks):
        start_idx, end_idx = chunk_id * chunk_size, min((chunk_id + 1) * chunk_size, BT)
        student_input_chunk = student_input[start_idx:end_idx]
        student_logits_chunk = (student_input_chunk @ student_weight.t()).float() / temperature
        teacher_logits_chunk = (teacher_input[start_idx:end_idx] @ teacher_weight.t()).float() / temperature
        student_prob_chunk = torch.log_softmax(student_logits_chunk, dim=-1)
        teacher_prob_chunk = torch.log_softmax(teacher_logits_chunk, dim=-1)
        softmax_s_chunk = torch.softmax(student_logits_chunk, dim=-1)
        chunk_labels = shift_labels[start_idx:end_idx] if has_label else None
        loss_chunk, student_prob_chunk = dispatch(
            "jsd_loss_and_grad", student_prob_chunk, teacher_prob_chunk, chunk_labels, float(jsd_beta),
            int(ignore_index), float(n_non_ignore),
        )  # fmt: skip
        total_loss = total_loss + loss_chunk.sum()
        student_logits_chunk = (
            student_prob_chunk - softmax_s_chunk * student_prob_chunk.sum(dim=-1, keepdim=True)
        ) / temperature
        student_logits_chunk = student_logits_chunk.to(dtype)
        grad_input[start_idx:end_idx] = student_logits_chunk @ student_weight
        if grad_weight is not None:
            if accum_dtype is None:
                grad_weight.addmm_(student_logits_chunk.t(), student_input_chunk)
            else:
                grad_weight.add_(torch.mm(student_logits_chunk.t(), student_input_chunk).float())
    grad_weight = (
        grad_weight.to(student_weight.dtype) if grad_weight is not None and accum_dtype is not None else grad_weight
    )
    return total_loss, grad_input, grad_weight


def fused_linear_jsd_backward(grad_output, grad_input, grad_weight):
    # Skip the elementwise scale when JSD is the final loss and its upstream
    # gradient is exactly 1.0.
    if torch.equal(grad_output, torch.tensor(1.0, device=grad_output.device)):
        return grad_input, grad_weight
    _scale_in_place(grad_output, grad_input, grad_weight)
    return grad_input, grad_weight


class LigerFusedLinearJSDFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, student_input, student_weight, teacher_input, teacher_weight, shift_labels=None, jsd_beta=0.5,
                ignore_index=-100, temperature=1.0, accum_dtype=None, jsd_impl=None, jsd_mode=None):  # fmt: skip
        has_label = False
        if shift_labels is not None:
            shift_labels = shift_labels.contiguous()
            has_label = True
        loss, grad_input, grad_weight = fused_linear_jsd_forward(
            student_input, student_weight, teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index,
            has_label, temperature, jsd_impl, jsd_mode, accum_dtype,
        )  # fmt: skip
        ctx.save_for_backward(grad_input.detach(), grad_weight.detach() if grad_weight is not None else None)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        (grad_input, grad_weight) = ctx.saved_tensors
        grad_input, grad_weight = fused_linear_jsd_backward(grad_output, grad_input, grad_weight)
        return (grad_input, grad_weight, None, None, None, None, None, None, None, None, None)


# ---------------------------------------------------------------- KL-div
def kl_loss_and_grad(logits, target, labels, ignore_index, temperature, eps, scale):
    """Per-row KL(target || softmax(logits / temperature)) times ``scale``, and its
    gradient with respect to the logits, in the logits' dtype (Liger's kernel writes it
    into the logits)."""
    up = logits.float() / temperature
    log_q = torch.log_softmax(up, dim=-1)
    t = target.float()
    rows = (t * (torch.log(t.clamp_min(eps)) - log_q)).sum(-1) * scale
    grad = (torch.softmax(up, dim=-1) * t.sum(-1, keepdim=True) - t) * (scale / temperature)
    if labels is not None:
        keep = labels != ignore_index
        rows, grad = rows * keep, grad * keep.unsqueeze(1)
    return rows, grad.to(logits.dtype)


def fused_linear_kl_div_forward(
    student_input,
    student_weight,
    target,
    shift_labels,
    reduction,
    ignore_index,
    has_label,
    temperature,
    eps,
    accum_dtype=None,
):
    BT, H = student_input.shape
    V = student_weight.shape[0]
    chunk_size, num_chunks = _chunks(BT, H, V)
    grad_weight, grad_input = _gradient_buffers(student_input, student_weight, accum_dtype)
    loss_1d = torch.zeros((BT,), dtype=torch.float32, device=student_input.device)
    n_non_ignore = (shift_labels != ignore_index).sum().item() if has_label else BT
    if n_non_ignore == 0:
        scale = 0.0
    elif reduction == "batchmean":
        scale = 1.0 / n_non_ignore
    elif reduction == "mean":
        scale = 1.0 / (n_non_ignore * V)
    else:  # "sum"
        scale = 1.0
    for chunk_id in range(num_chunks):
        start_idx, end_idx = chunk_id * chunk_size, min((chunk_id + 1) * chunk_size, BT)
        input_chunk = student_input[start_idx:end_idx]
        logits_chunk = input_chunk @ student_weight.t()
        chunk_labels = shift_labels[start_idx:end_idx] if has_label else None
        loss_rows, logits_chunk = dispatch(
            "kl_loss_and_grad", logits_chunk, target[start_idx:end_idx], chunk_labels, ignore_index, temperature, eps,
            scale,
        )  # fmt: skip
        loss_1d[start_idx:end_idx] = loss_rows
        grad_input[start_idx:end_idx] = logits_chunk @ student_weight
        if grad_weight is not None:
            if grad_weight.dtype == logits_chunk.dtype:
                torch.addmm(grad_weight, logits_chunk.t(), input_chunk, out=grad_weight)
            else:
                grad_weight.add_(torch.mm(logits_chunk.t(), input_chunk).float())
    loss = loss_1d.sum()
    grad_weight = (
        grad_weight.to(student_weight.dtype) if grad_weight is not None and accum_dtype is not None else grad_weight
    )
    return loss, grad_input, grad_weight


def fused_linear_kl_div_backward(grad_output, grad_input, grad_weight):
    # If KL is the last layer, grad_output is 1.0. Skip the mul to save time
    if torch.ne(grad_output, torch.tensor(1.0, device=grad_output.device)):
        _scale_in_place(grad_output, grad_input, grad_weight)
    return grad_input, grad_weight


class LigerFusedLinearKLDIVFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, student_input, student_weight, target, shift_labels=None, reduction="batchmean",
                ignore_index=-100, temperature=1.0, eps=1e-10, accum_dtype=None):  # fmt: skip
        has_label = shift_labels is not None
        loss, grad_input, grad_weight = fused_linear_kl_div_forward(
            student_input, student_weight, target, shift_labels, reduction, ignore_index, has_label, temperature,
            eps, accum_dtype,
        )  # fmt: skip
        ctx.save_for_backward(grad_input.detach(), grad_weight.detach() if grad_weight is not None else None)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        (grad_input, grad_weight) = ctx.saved_tensors
        grad_input, grad_weight = fused_linear_kl_div_backward(grad_output, grad_input, grad_weight)
        return (grad_input, grad_weight, None, None, None, None, None, None, None)


# Liger registers each kernel with its dispatcher at import
_registry = sys.modules[_DISPATCH]
_registry.REGISTRY.update(
    jsd_loss_and_grad=_registry.OpImpl(jsd_loss_and_grad), kl_loss_and_grad=_registry.OpImpl(kl_loss_and_grad)
)
