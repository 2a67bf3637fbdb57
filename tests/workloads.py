"""Workloads shared by the tests (not a test file): fused linear cross entropy (FLCE)
loops as Liger-Kernel writes them, in plain torch, small enough for the CPU."""

from __future__ import annotations

import torch


def chunked_grad_input(x, w, chunk):
    """FLCE's grad_input loop: each chunk's product written into its rows with
    ``mm(..., out=grad_input[a:b])``."""
    grad_input = torch.zeros_like(x)
    for start in range(0, x.shape[0], chunk):
        g = torch.tanh(x[start : start + chunk] @ w.t())
        torch.mm(g, w, out=grad_input[start : start + chunk])
    return grad_input


def accumulate_in_chunks(grad_weight, grad_logits, x, chunk: int, **kwargs):
    """FLCE's grad_weight loop: ``addmm(grad_weight, g.t(), x_k, out=grad_weight)`` per
    chunk (``out_dtype=torch.float32`` for bf16/fp16 products into an fp32 buffer)."""
    for start in range(0, grad_logits.shape[0], chunk):
        g = grad_logits[start : start + chunk]
        torch.addmm(grad_weight, g.t(), x[start : start + chunk], out=grad_weight, **kwargs)
    return grad_weight


def accumulate_separate_chunks(grad_weight, grad_logits: list, x, **kwargs):
    """As :func:`accumulate_in_chunks`, each chunk's gradient a tensor of its own (as
    Liger's are: each chunk's logits buffer): a merged pair cannot read both as one slice."""
    start = 0
    for g in grad_logits:
        torch.addmm(grad_weight, g.t(), x[start : start + g.shape[0]], out=grad_weight, **kwargs)
        start += g.shape[0]
    return grad_weight


# FLCE without autograd, at a size whose chunks the tests can count.
BT, H, V, CHUNK = 32, 16, 96, 8
CHUNKS = BT // CHUNK


def flce_like(x, w, onehot, out_dtype=None):
    """A fused-linear-cross-entropy loop as Liger writes it (no autograd): per chunk of
    ``CHUNK`` rows of ``x`` (``CHUNKS`` chunks of ``BT`` rows, the default of
    :func:`flce_inputs`) the logits, their gradient, grad_input written through
    mm(out=slice), grad_weight accumulated with addmm(out=grad_weight)."""
    grad_input = torch.zeros_like(x)
    grad_weight = torch.zeros(V, H, dtype=torch.float32 if out_dtype else x.dtype)
    loss = torch.zeros((), dtype=torch.float32 if x.dtype != torch.float64 else x.dtype)
    for start in range(0, x.shape[0], CHUNK):
        x_k = x[start : start + CHUNK]
        logits = x_k @ w.t()
        y = onehot[start : start + CHUNK]
        g = (torch.softmax(logits.float(), -1) - y).to(x.dtype)
        loss = loss + (torch.logsumexp(logits.float(), -1) - (logits.float() * y).sum(-1)).sum()
        torch.mm(g, w, out=grad_input[start : start + CHUNK])
        if out_dtype is None:
            torch.addmm(grad_weight, g.t(), x_k, out=grad_weight)
        else:
            torch.addmm(grad_weight, g.t(), x_k, out_dtype=out_dtype, out=grad_weight)
    return loss, grad_input, grad_weight


def flce_inputs(dtype, rows=BT):
    """(x, w, one-hot targets) for :func:`flce_like`, of ``rows`` tokens."""
    onehot = torch.nn.functional.one_hot(torch.randint(V, (rows,)), V).float()
    return torch.randn(rows, H, dtype=dtype), torch.randn(V, H, dtype=dtype) / 4, onehot


def flce_with_a_graph_break(x, w, target, chunk, accum_dtype=None):
    """Liger 0.8.5's forward, reduced: gradient buffers, an ``.item()`` (a graph break
    under Dynamo's default config), then per chunk (``range(cdiv(BT, chunk))``, the last
    one cut at ``BT``) the logits, their gradient, grad_input written through
    mm(out=slice) and grad_weight accumulated with addmm(out=grad_weight)
    (``out_dtype=accum_dtype`` into a buffer of that dtype when given, as Liger's
    ``accum_dtype``)."""
    rows = x.shape[0]
    grad_input = torch.zeros_like(x)
    grad_weight = torch.zeros_like(w, dtype=accum_dtype or w.dtype)
    accumulate = {"out_dtype": accum_dtype} if accum_dtype else {}
    n_valid = (target >= 0).sum().item()
    loss = x.new_zeros((), dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)
    for k in range((rows + chunk - 1) // chunk):
        start, end = k * chunk, min((k + 1) * chunk, rows)
        x_k = x[start:end]
        logits = x_k @ w.t()
        onehot = torch.nn.functional.one_hot(target[start:end], w.shape[0]).to(logits.dtype)
        g = (torch.softmax(logits, -1) - onehot) / n_valid
        wide = logits.to(loss.dtype)
        loss = loss + (torch.logsumexp(wide, -1) - (wide * onehot).sum(-1)).sum() / n_valid
        torch.mm(g, w, out=grad_input[start:end])
        torch.addmm(grad_weight, g.t(), x_k, out=grad_weight, **accumulate)
    return loss, grad_input, grad_weight


def next_power_of_2(n):
    """``triton.next_power_of_2`` as Triton writes it (bit twiddling), for machines
    without Triton; of the same name, which the redirect checks first."""
    n -= 1
    n |= n >> 1
    n |= n >> 2
    n |= n >> 4
    n |= n >> 8
    n |= n >> 16
    n |= n >> 32
    n += 1
    return n


def flce_in_power_of_2_chunks(x, w, target, chunk_mem_const: int = 1, accum_dtype=None):
    """:func:`flce_with_a_graph_break` in Liger 0.8.5's chunks:
    ``next_power_of_2(cdiv(BT, cdiv(V, chunk_mem_const * H)))`` rows each."""
    inc_factor = (w.shape[0] + chunk_mem_const * x.shape[1] - 1) // (chunk_mem_const * x.shape[1])
    chunk = next_power_of_2((x.shape[0] + inc_factor - 1) // inc_factor)
    return flce_with_a_graph_break(x, w, target, chunk, accum_dtype)


def chunks_through_one_logits_buffer(x, w, target):
    """Liger 0.8.5's loop with its logits buffer: one ``[chunk, V]`` buffer made after the
    ``.item()`` break, each chunk's logits written into its first rows
    (``mm(x_k, w.t(), out=storage[:n_k])``), changed there in place (as Liger's kernel
    writes the gradient over the logits) and read back for ``grad_input``."""
    rows = x.shape[0]
    chunk = 16 if rows <= 64 else 32
    grad_input = torch.zeros_like(x)
    n_valid = (target >= 0).sum().item()
    storage = torch.empty((chunk, w.shape[0]), dtype=x.dtype)
    for k in range((rows + chunk - 1) // chunk):
        start, end = k * chunk, min((k + 1) * chunk, rows)
        logits = storage[: end - start]
        torch.mm(x[start:end], w.t(), out=logits)
        logits.mul_(1.0 / n_valid)
        torch.mm(logits, w, out=grad_input[start:end])
    return grad_input
