"""Liger's cross-entropy kernel with class weights and softcap, compiled: torch's analysis
of what the kernel writes succeeds (no traceback logged), finds the logits and losses
alone written, so AOTAutograd copies only those before the kernel (not its labels and
class weights); and the loss and gradients are eager's."""

from __future__ import annotations

import logging

import pytest
import torch
from torch._higher_order_ops import triton_kernel_wrap as tkw

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
liger = pytest.importorskip("liger_kernel.transformers.functional", reason="needs liger-kernel")


@pytest.fixture
def copied(monkeypatch):
    """kernel name -> the arguments AOTAutograd copies before it (what the analysis found written)."""
    seen: dict[str, list[str]] = {}
    stock = tkw.get_mutated_tensors

    def get_mutated_tensors(kernel_idx, constant_args_idx, kwargs, *args):
        written = stock(kernel_idx, constant_args_idx, kwargs, *args)
        kernel = tkw.kernel_side_table.get_kernel(kernel_idx)
        seen[getattr(getattr(kernel, "fn", kernel), "__name__", str(kernel))] = list(written)
        return written

    monkeypatch.setattr(tkw, "get_mutated_tensors", get_mutated_tensors)
    return seen


@pytest.mark.parametrize("weighted, softcap", [(True, None), (False, 30.0), (True, 30.0)], ids=["class-weights", "softcap", "both"])
def test_the_kernel_is_analysed_and_only_its_outputs_are_copied(copied, caplog, weighted, softcap):
    caplog.set_level(logging.WARNING, logger="torch")
    torch.manual_seed(0)
    x = torch.randn(188, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(512, 64, device="cuda", dtype=torch.bfloat16) / 8).requires_grad_()
    target = torch.randint(512, (188,), device="cuda")
    target[::7] = -100
    ce_weight = torch.rand(512, device="cuda") + 0.5 if weighted else None

    def head(x, w):
        return liger.liger_fused_linear_cross_entropy(x, w, target, ce_weight=ce_weight, softcap=softcap, accum_dtype=torch.float32)

    want = head(x, w)
    want_grads = torch.autograd.grad(want, (x, w))
    got = torch.compile(head)(x, w)
    got_grads = torch.autograd.grad(got, (x, w))
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert not tracebacks, tracebacks[:1]
    assert copied["liger_cross_entropy_kernel"] == ["X_ptr", "loss_ptr"], copied
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, e in zip(got_grads, want_grads):  # bf16; grad_w may be summed two chunks at a time (accumulate_pairs)
        torch.testing.assert_close(g, e, rtol=1e-2, atol=1e-2)
