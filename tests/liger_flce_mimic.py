"""Liger-Kernel's FLCE forward, backward and autograd.Function in pure torch, for the CPU.

The same signature, chunk loop (``chunk_size = next_power_of_2(cdiv(BT, cdiv(V, H)))``),
``.item()`` of the non-ignored count, in-place gradient of each logits chunk, slice writes
and weight-gradient accumulation as Liger 0.8.5's
``liger_kernel.ops.fused_linear_cross_entropy``, and its backward (the saved gradients
scaled in place where ``grad_output`` is not 1.0, a data-dependent test); Liger's Triton cross-entropy kernel is
replaced by torch ops that write what it writes (the loss rows, and the gradient into the
logits).  Options it does not model (``softcap``, ``ce_weight``)
raise.

:func:`load` imports this file under Liger's module name, which is what the package
recognises; ``tests/helpers.liger_mimic`` does so for a test and undoes it afterwards.
"""

import torch

_CHUNK_MEM_CONST = 1


def _cdiv(a, b):
    return (a + b - 1) // b


def _next_power_of_2(n):
    p = 1
    while p < n:
        p *= 2
    return p


def _cross_entropy_in_place(logits, target, loss, z_loss, accuracy, predicted, n_non_ignore, ignore_index,
                            lse_square_scale, label_smoothing, reduction):
    """What liger_cross_entropy_kernel does: the loss rows into ``loss``, the gradient
    of the (reduced) loss into ``logits``."""
    valid = target != ignore_index
    t = torch.where(valid, target, 0)
    x = logits.float()
    lse = torch.logsumexp(x, dim=-1)
    picked = x.gather(1, t.unsqueeze(1)).squeeze(1)
    v = x.shape[1]
    rows = lse - picked
    if label_smoothing > 0:
        rows = (1 - label_smoothing) * rows + label_smoothing * (lse - x.mean(dim=-1))
    rows = rows + lse_square_scale * lse * lse
    scale = 1.0 / n_non_ignore if reduction == "mean" else 1.0
    loss.copy_(torch.where(valid, rows, 0.0) * scale)
    if z_loss is not None:
        z_loss.copy_((torch.where(valid, lse_square_scale * lse * lse, 0.0) * scale).to(z_loss.dtype))
    if accuracy is not None:
        accuracy.copy_(torch.where(valid, (x.argmax(dim=-1) == t).float(), 0.0))
    if predicted is not None:
        predicted.copy_(torch.where(valid, x.argmax(dim=-1), -1))
    softmax = torch.softmax(x, dim=-1)
    grad = softmax * (1 + 2 * lse_square_scale * lse).unsqueeze(1) - (1 - label_smoothing) * torch.nn.functional.one_hot(t, v)
    grad = grad - label_smoothing / v
    grad = grad * (valid.float() * scale).unsqueeze(1)
    logits.copy_(grad.to(logits.dtype))


def fused_linear_cross_entropy_forward(
    _input,
    weight,
    target,
    ce_weight=None,
    bias=None,
    ignore_index=-100,
    lse_square_scale=0.0,
    label_smoothing=0.0,
    reduction="mean",
    softcap=None,
    return_z_loss=False,
    accum_dtype=None,
    use_token_scaling=False,
    return_token_accuracy=False,
    return_predicted_tokens=False,
    chunk_mem_const: int = _CHUNK_MEM_CONST,
):
    if softcap is not None or ce_weight is not None:
        raise NotImplementedError("the mimic does not model softcap or ce_weight")
    device = _input.device
    input_requires_grad = _input.requires_grad
    BT, H = _input.shape
    V = weight.shape[0]
    inc_factor = _cdiv(V, chunk_mem_const * H)
    chunk_size = _next_power_of_2(_cdiv(BT, inc_factor))
    chunk_size = min(chunk_size, BT)
    num_chunks = _cdiv(BT, chunk_size)
    grad_input = torch.zeros_like(_input, device=device)
    if input_requires_grad:
        dtype = weight.dtype if accum_dtype is None else accum_dtype
        grad_weight = torch.zeros_like(weight, dtype=dtype, device=device) if weight.requires_grad else None
        grad_bias = torch.zeros_like(bias, dtype=dtype, device=device) if bias is not None else None
    else:
        grad_weight = None
        grad_bias = None
    loss_1d = torch.zeros(BT, dtype=torch.float32, device=device)
    z_loss_1d = torch.zeros(BT, dtype=_input.dtype, device=device) if return_z_loss else None
    token_accuracy_1d = torch.zeros(BT, dtype=torch.float32, device=device) if return_token_accuracy else None
    predicted_tokens_1d = torch.full((BT,), -1, dtype=torch.int64, device=device) if return_predicted_tokens else None
    target_mask = target != ignore_index
    total_n_non_ignore = target_mask.sum().item()
    for chunk_id in range(num_chunks):
        start_idx = chunk_id * chunk_size
        end_idx = min((chunk_id + 1) * chunk_size, BT)
        _input_chunk = _input[start_idx:end_idx]
        logits_chunk = _input_chunk @ weight.t()
        if bias is not None:
            logits_chunk = logits_chunk + bias
        target_chunk = target[start_idx:end_idx]
        loss_1d_slice = loss_1d[start_idx:end_idx]
        z_loss_1d_slice = z_loss_1d[start_idx:end_idx] if return_z_loss else None
        accuracy_slice = token_accuracy_1d[start_idx:end_idx] if return_token_accuracy else None
        predicted_slice = predicted_tokens_1d[start_idx:end_idx] if return_predicted_tokens else None
        logits_chunk = logits_chunk.contiguous()
        if use_token_scaling:  # Liger's code: each token's predicted probability of its target, detached
            probs = torch.softmax(logits_chunk.detach().clone(), dim=-1)
            valid_target_mask = target_chunk != ignore_index
            valid_targets = target_chunk[valid_target_mask]
            if len(valid_targets) > 0:
                valid_probs = probs[valid_target_mask]
                pred_probs_valid = torch.gather(valid_probs, -1, valid_targets.unsqueeze(-1)).squeeze(-1)
                del valid_probs
                pred_probs = torch.zeros_like(target_chunk, dtype=probs.dtype, device=probs.device)
                pred_probs[valid_target_mask] = pred_probs_valid
                del pred_probs_valid
            else:
                pred_probs = torch.zeros_like(target_chunk, dtype=probs.dtype, device=probs.device)
            scaling_factors = pred_probs.detach()
            del probs, pred_probs, valid_target_mask, valid_targets
        _cross_entropy_in_place(logits_chunk, target_chunk, loss_1d_slice, z_loss_1d_slice, accuracy_slice,
                                predicted_slice, total_n_non_ignore, ignore_index, lse_square_scale, label_smoothing,
                                reduction)
        if use_token_scaling:
            loss_1d_slice = loss_1d_slice * scaling_factors
            if return_z_loss:
                z_loss_1d_slice = z_loss_1d_slice * scaling_factors
        loss_1d[start_idx:end_idx] = loss_1d_slice
        if return_z_loss:
            z_loss_1d[start_idx:end_idx] = z_loss_1d_slice
        grad_logits_chunk = logits_chunk
        if use_token_scaling:
            grad_logits_chunk = grad_logits_chunk * scaling_factors.unsqueeze(-1)
        if input_requires_grad:
            grad_input[start_idx:end_idx] = grad_logits_chunk @ weight
        if grad_weight is not None and input_requires_grad:
            grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float()
        if bias is not None and input_requires_grad:
            torch.add(input=grad_bias, other=grad_logits_chunk.sum(dim=0), out=grad_bias, alpha=1.0)
    if reduction == "none":
        loss = loss_1d
        z_loss = z_loss_1d if return_z_loss else None
        token_accuracy = token_accuracy_1d if return_token_accuracy else None
    else:
        loss = torch.sum(loss_1d)
        z_loss = torch.sum(z_loss_1d) if return_z_loss else None
        token_accuracy = torch.sum(token_accuracy_1d) / total_n_non_ignore if return_token_accuracy else None
    predicted_tokens = predicted_tokens_1d if return_predicted_tokens else None
    grad_weight = grad_weight.to(weight.dtype) if grad_weight is not None else None
    grad_bias = grad_bias.to(bias.dtype) if grad_bias is not None else None
    return loss, z_loss, token_accuracy, predicted_tokens, grad_input, grad_weight, grad_bias


def fused_linear_cross_entropy_backward(grad_output, grad_input, grad_weight, grad_bias):
    # If cross entropy is the last layer, grad_output is 1.0. Skip the mul to save time
    if not torch.equal(grad_output, torch.tensor(1.0, device=grad_output.device)):
        # Liger: element_mul_kernel, in place: the product in float32 (or wider) stored in the tensor's dtype
        for grad in (grad_input, grad_weight, grad_bias):
            if grad is not None:
                grad.copy_((grad.to(torch.promote_types(grad.dtype, torch.float32)) * grad_output).to(grad.dtype))
    return grad_input, grad_weight, grad_bias


class LigerFusedLinearCrossEntropyFunction(torch.autograd.Function):
    supports_inner_impl_dispatch = False  # Liger 0.8.5: True, with three more forward parameters

    @staticmethod
    def forward(ctx, _input, weight, target, bias=None, ce_weight=None, ignore_index=-100, lse_square_scale=0.0,
                label_smoothing=0.0, reduction="mean", softcap=None, return_z_loss=False, accum_dtype=None,
                use_token_scaling=False, return_token_accuracy=False, return_predicted_tokens=False):
        loss, z_loss, token_accuracy, predicted_tokens, grad_input, grad_weight, grad_bias = (
            fused_linear_cross_entropy_forward(
                _input=_input, weight=weight, target=target, bias=bias, ce_weight=ce_weight,
                ignore_index=ignore_index, lse_square_scale=lse_square_scale, label_smoothing=label_smoothing,
                reduction=reduction, softcap=softcap, return_z_loss=return_z_loss, accum_dtype=accum_dtype,
                use_token_scaling=use_token_scaling, return_token_accuracy=return_token_accuracy,
                return_predicted_tokens=return_predicted_tokens,
            )
        )
        ctx.save_for_backward(
            grad_input.detach(),
            grad_weight.detach() if grad_weight is not None else None,
            grad_bias.detach() if grad_bias is not None else None,
        )
        return loss, z_loss, token_accuracy, predicted_tokens

    @staticmethod
    def backward(ctx, grad_output, *unused):
        grad_input, grad_weight, grad_bias = ctx.saved_tensors
        grad_input, grad_weight, grad_bias = fused_linear_cross_entropy_backward(grad_output, grad_input, grad_weight, grad_bias)
        return (grad_input, grad_weight, None, grad_bias) + (None,) * 11


def flce(_input, weight, target, bias=None, **options):
    """``LigerFusedLinearCrossEntropyFunction.apply`` with Liger's keyword options, as Liger
    0.8.5's ``liger_fused_linear_cross_entropy`` calls it (it asks the Function whether it
    takes Liger's implementation arguments)."""
    names = ("ce_weight", "ignore_index", "lse_square_scale", "label_smoothing", "reduction", "softcap",
             "return_z_loss", "accum_dtype", "use_token_scaling", "return_token_accuracy", "return_predicted_tokens")
    defaults = (None, -100, 0.0, 0.0, "mean", None, False, None, False, False, False)
    values = [options.pop(n, d) for n, d in zip(names, defaults)]
    assert not options, options
    if getattr(LigerFusedLinearCrossEntropyFunction, "supports_inner_impl_dispatch", False):  # as Liger's functional entry
        values += [None, None, _CHUNK_MEM_CONST]
    return LigerFusedLinearCrossEntropyFunction.apply(_input, weight, target, bias, *values)
