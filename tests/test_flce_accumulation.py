"""Liger FLCE's weight-gradient pattern: a chunked, in-place accumulation of
bf16 products into an fp32 buffer with addmm(..., out_dtype=fp32, out=buffer)."""

import pytest
import torch

from compile_helpers import compile_and_run


def accumulate_in_chunks(grad_weight, grad_logits, x, chunk: int):
    for start in range(0, grad_logits.shape[0], chunk):
        g = grad_logits[start : start + chunk]
        torch.addmm(grad_weight, g.t(), x[start : start + chunk], out_dtype=torch.float32, out=grad_weight)
    return grad_weight


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("bt,v,h,chunk", [(64, 48, 40, 16), (47, 123, 31, 16), (8, 32, 16, 8)])
def test_chunked_accumulation_into_fp32_buffer(bt, v, h, chunk, low):
    grad_logits = torch.randn(bt, v, dtype=low)
    x = torch.randn(bt, h, dtype=low)
    start = torch.randn(v, h)
    grad_weight = start.clone()
    compiled = compile_and_run(accumulate_in_chunks, grad_weight, grad_logits, x, chunk)
    chunks = -(-bt // chunk)
    assert compiled.lowered("addmm") == chunks, compiled.counts
    assert compiled.result is grad_weight and grad_weight.dtype == torch.float32
    ref = start.double() + grad_logits.double().t() @ x.double()
    err = ((grad_weight.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-5, err


def test_accumulation_keeps_the_buffer_identity_across_calls():
    grad_logits = torch.randn(32, 24, dtype=torch.bfloat16)
    x = torch.randn(32, 16, dtype=torch.bfloat16)
    grad_weight = torch.zeros(24, 16)
    fn = torch.compile(accumulate_in_chunks, backend="inductor", fullgraph=True)
    for _ in range(3):
        fn(grad_weight, grad_logits, x, 8)
    ref = 3 * (grad_logits.double().t() @ x.double())
    assert ((grad_weight.double() - ref).norm() / ref.norm()).item() < 1e-5
