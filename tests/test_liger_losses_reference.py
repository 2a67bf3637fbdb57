"""The float64 references of ``benchmarks/liger_losses.py`` (Liger's FLCE, JSD and KL-div
definitions, autograd chunk by chunk) against independent formulas on the CPU:
``torch.nn.functional`` where it has the loss, and the closed-form logit gradients that
Liger 0.8.5's kernels write (``ops/cross_entropy.py``, ``ops/jsd.py``,
``ops/fused_linear_kl_div.py``) as the chain rule gives them; and the script's ``--list``,
which needs neither a GPU nor Liger."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import liger_losses  # noqa: E402  (benchmarks/ on sys.path)
from flce_bench import float64_reference  # noqa: E402

BT, H, V = 11, 6, 13
IGNORE = liger_losses.IGNORE


def inputs(seed: int = 0, h: int = H):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(BT, h, generator=g, dtype=torch.float64)
    w = torch.randn(V, h, generator=g, dtype=torch.float64) * h**-0.5 * 3
    t = torch.randint(V, (BT,), generator=g)
    t[[1, 4, 8]] = IGNORE
    return x, w, t


def autograd(loss_of, x, w):
    """(loss, grad_x, grad_w) of ``loss_of(x, w)`` on float64 leaves."""
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    loss = loss_of(x, w)
    loss.sum().backward()
    return loss.detach(), x.grad, w.grad


def from_logit_grad(g, x, w):
    """grad_x, grad_w of a loss whose gradient w.r.t. the logits ``x @ w.t()`` is ``g``."""
    return g @ w, g.t() @ x


def close(got, want, tol=1e-10):
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


# ---- FLCE ----

FLCE_CASES = {
    "plain": {},
    "label_smoothing": {"label_smoothing": 0.1},
    "sum": {"reduction": "sum"},
    "none": {"reduction": "none"},
    "softcap": {"softcap": 2.0},
    "ce_weight": {"ce_weight": True},
    "ce_weight_smoothing_sum": {"ce_weight": True, "label_smoothing": 0.2, "reduction": "sum"},
    "bias": {"bias": True},
}


@pytest.mark.parametrize("case", FLCE_CASES.values(), ids=FLCE_CASES.keys())
def test_flce_reference_is_torch_cross_entropy(case):
    x, w, t = inputs(1)
    g = torch.Generator().manual_seed(2)
    cw = torch.rand(V, generator=g, dtype=torch.float64) + 0.5 if case.get("ce_weight") else None
    b = torch.randn(V, generator=g, dtype=torch.float64) if case.get("bias") else None
    ls, red, cap = case.get("label_smoothing", 0.0), case.get("reduction", "mean"), case.get("softcap")

    def torch_loss(x, w):
        z = x @ w.t() + (b if b is not None else 0)
        z = cap * torch.tanh(z / cap) if cap else z
        return F.cross_entropy(z, t, weight=cw, ignore_index=IGNORE, label_smoothing=ls, reduction=red)

    got = liger_losses.flce_reference(x, w, t, b, cw, label_smoothing=ls, reduction=red, softcap=cap, rows=4)
    close(got, autograd(torch_loss, x, w))


def test_flce_reference_is_flce_bench_reference():
    x, w, t = inputs(3)
    close(liger_losses.flce_reference(x, w, t, rows=5), float64_reference(x, w, t, rows=3, ignore_index=IGNORE))
    close(liger_losses.flce_reference(x, w, t, softcap=1.5, rows=5), float64_reference(x, w, t, rows=3, softcap=1.5, ignore_index=IGNORE))


@pytest.mark.parametrize("weighted", [False, True])
def test_flce_reference_gradient_is_liger_kernels(weighted):
    """Label smoothing, z-loss and (optionally) class weights at once, mean reduction: the
    loss rows and the logit gradient as ``liger_cross_entropy_kernel`` writes them."""
    x, w, t = inputs(4)
    ls, s = 0.1, 1e-2
    cw = torch.rand(V, generator=torch.Generator().manual_seed(5), dtype=torch.float64) + 0.5 if weighted else None
    keep, y = t != IGNORE, t.clamp(min=0)
    n = keep.sum().double()
    wy = cw[y] if weighted else torch.ones(BT, dtype=torch.float64)
    denom = wy[keep].sum()
    z = x @ w.t()
    lse, p, eps = z.logsumexp(-1), torch.softmax(z, -1), ls / V
    onehot = F.one_hot(y, V).double()
    if weighted:
        loss = wy * (lse - z.gather(1, y[:, None])[:, 0]) * (1 - ls) + eps * ((lse[:, None] - z) * cw).sum(-1)
        grad = (1 - ls) * wy[:, None] * (p - onehot) + eps * (p * cw.sum() - cw)
    else:
        loss = (lse - z.gather(1, y[:, None])[:, 0]) * (1 - ls) + ls * lse - eps * z.sum(-1)
        grad = p - eps - (1 - ls) * onehot
    loss = (loss / denom + s * lse * lse / n) * keep
    grad = (grad / denom + 2 * s * lse[:, None] * p / n) * keep[:, None]
    got = liger_losses.flce_reference(x, w, t, None, cw, label_smoothing=ls, lse_square_scale=s, rows=3)
    close(got, (loss.sum(), *from_logit_grad(grad, x, w)))


def test_flce_reference_token_scaling_scales_each_row_by_its_detached_probability():
    x, w, t = inputs(6)
    cap = 3.0

    def scaled(x, w):
        z = cap * torch.tanh(x @ w.t() / cap)
        rows = F.cross_entropy(z, t, ignore_index=IGNORE, reduction="none") + 1e-3 * z.logsumexp(-1) ** 2 * (t != IGNORE)
        return (rows * torch.softmax(z.detach(), -1).gather(1, t.clamp(min=0)[:, None])[:, 0]).sum() / (t != IGNORE).sum()

    got = liger_losses.flce_reference(x, w, t, softcap=cap, lse_square_scale=1e-3, use_token_scaling=True, rows=4)
    close(got, autograd(scaled, x, w))


# ---- JSD ----

def jsd_inputs(seed: int, labels: bool):
    g = torch.Generator().manual_seed(seed)
    xs, ws = torch.randn(BT, 5, generator=g, dtype=torch.float64), torch.randn(V, 5, generator=g, dtype=torch.float64)
    xt, wt = torch.randn(BT, 7, generator=g, dtype=torch.float64), torch.randn(V, 7, generator=g, dtype=torch.float64)
    t = None
    if labels:
        t = torch.randint(V, (BT,), generator=g)
        t[[0, 5]] = IGNORE
    return xs, ws, xt, wt, t


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
@pytest.mark.parametrize("labels", [False, True])
def test_jsd_reference_is_kl_divergences(beta, temperature, labels):
    """beta 0: KL(P || Q) (forward KL), beta 1: KL(Q || P), else beta KL(P || M) +
    (1 - beta) KL(Q || M), M = beta P + (1 - beta) Q, with P the teacher's distribution and
    Q the student's, averaged over the rows not labelled ignore_index."""
    xs, ws, xt, wt, t = jsd_inputs(7, labels)
    keep = t != IGNORE if labels else torch.ones(BT, dtype=torch.bool)
    p = torch.log_softmax(xt @ wt.t() / temperature, -1)

    def kl_rows(log_input, log_target):  # KL(target || input) per row
        return F.kl_div(log_input, log_target, log_target=True, reduction="none").sum(-1)

    def jsd(xs, ws):
        q = torch.log_softmax(xs @ ws.t() / temperature, -1)
        if beta == 0:
            rows = kl_rows(q, p)
        elif beta == 1:
            rows = kl_rows(p, q)
        else:
            m = (beta * p.exp() + (1 - beta) * q.exp()).log()
            rows = beta * kl_rows(m, p) + (1 - beta) * kl_rows(m, q)
        return rows[keep].sum() / keep.sum()

    got = liger_losses.jsd_reference(xs, ws, xt, wt, t, beta=beta, temperature=temperature, rows=4)
    close(got, autograd(jsd, xs, ws))


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_jsd_reference_gradient_is_liger_kernels(beta):
    """``_jsd_kernel``'s dX (w.r.t. the student's log-probabilities X), then
    fused_linear_jsd's ``(dX - softmax(z / T) * sum(dX)) / T``."""
    xs, ws, xt, wt, t = jsd_inputs(8, labels=True)
    temperature = 2.0
    keep = (t != IGNORE).double()
    x = torch.log_softmax(xs @ ws.t() / temperature, -1)
    y = torch.log_softmax(xt @ wt.t() / temperature, -1)
    if beta == 0:
        loss, dx = y.exp() * (y - x), -y.exp()
    elif beta == 1:
        loss = x.exp() * (x - y)
        dx = loss + x.exp()
    else:
        log_m = (beta * y.exp() + (1 - beta) * x.exp()).log()
        loss = beta * y.exp() * (y - log_m) + (1 - beta) * x.exp() * (x - log_m)
        dx = (1 - beta) * x.exp() * (x - log_m)
    scale = keep[:, None] / keep.sum()
    loss, dx = loss * scale, dx * scale
    grad = (dx - x.exp() * dx.sum(-1, keepdim=True)) / temperature
    got = liger_losses.jsd_reference(xs, ws, xt, wt, t, beta=beta, temperature=temperature, rows=3)
    close(got, (loss.sum(), *from_logit_grad(grad, xs, ws)))


# ---- KL-div ----

@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_kl_reference_is_torch_kl_div_batchmean(temperature):
    x, w, _ = inputs(9)
    q = torch.softmax(torch.randn(BT, V, generator=torch.Generator().manual_seed(10), dtype=torch.float64), -1)
    q[2, :4] = 0  # 0 log 0 = 0 (Liger clamps q to eps before the log)
    q[2] /= q[2].sum()

    def kl(x, w):
        return F.kl_div(torch.log_softmax(x @ w.t() / temperature, -1), q, reduction="batchmean")

    got = liger_losses.kl_reference(x, w, q, temperature=temperature, rows=4)
    close(got, autograd(kl, x, w))


@pytest.mark.parametrize("reduction", ["batchmean", "mean", "sum"])
def test_kl_reference_gradient_is_liger_kernel(reduction):
    """``_kl_div_kernel``: loss ``(a1 + lse * a2) * scale`` and dL/dlogits ``-scale * (q -
    softmax * sum(q)) / T``; rows labelled ignore_index 0; q need not sum to 1 (bf16)."""
    x, w, t = inputs(11)
    temperature = 1.5
    q = torch.rand(BT, V, generator=torch.Generator().manual_seed(12), dtype=torch.float64) / V * 2
    keep = (t != IGNORE).double()
    n = keep.sum()
    scale = {"batchmean": 1 / n, "mean": 1 / (n * V), "sum": 1.0}[reduction] * keep[:, None]
    z = x @ w.t() / temperature
    a1, a2 = (q * (q.log() - z)).sum(-1, keepdim=True), q.sum(-1, keepdim=True)
    loss = (a1 + z.logsumexp(-1, keepdim=True) * a2) * scale
    grad = -scale * (q - torch.softmax(z, -1) * a2) / temperature
    got = liger_losses.kl_reference(x, w, q, t, reduction=reduction, temperature=temperature, rows=4)
    close(got, (loss.sum(), *from_logit_grad(grad, x, w)))


# ---- the script without a GPU ----

def test_liger_chunk_counts():
    assert liger_losses.chunks(4096, 4096, 128256, 1) == 32  # Llama-3-8B FLCE: chunks of 128 rows
    assert liger_losses.chunks(4096, 896, 151936, 1) == 128  # Qwen2.5-0.5B: 32 rows
    assert liger_losses.chunks(4096, 4096, 128256, 16) == 2  # KL's budget constant 16
    assert liger_losses.chunks(100, 4096, 128256, 16) == 2  # 64 + 36 rows
    assert liger_losses.chunks(64, 4096, 65536, 16) == 1


def test_list_runs_without_gpu_or_liger(capsys):
    assert liger_losses.main(["--list", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "flce:plain" in out and "kl:fp32" in out and "rows, BT 4096" in out
    assert liger_losses.main(["--list", "--losses", "jsd:None-T2", "kl", "--heads", "qwen2.5-0.5b", "--graphs", "static"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["jsd:None-T2", "kl:fp32", "kl:None"]
    with pytest.raises(SystemExit):
        liger_losses.main(["--list", "--losses", "nope"])
    with pytest.raises(SystemExit):
        liger_losses.main(["--list", "--reps", "5"])
