"""On a CUDA GPU: ``inductor_addmm_fix::scale_gradient_``'s Triton kernel, which the
backward traced for Liger's losses runs on a donated saved gradient, writes what the
pointwise product writes, bit for bit, leaves the gradient as it is at 1.0, and torch's ops
take a gradient the kernel does not."""

import zlib

import pytest
import torch

from inductor_addmm_fix.dynamo import liger_head_op

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
#: sizes: one element, under one tile, across the last program's tiles, a Llama-like row count
SIZES = [(1,), (1000,), (4096 * 16 + 5,), (3001, 513)]


def scale(grad, factor):
    liger_head_op.scale_in_place_op()
    torch.ops.inductor_addmm_fix.scale_gradient_(grad, factor)
    return grad


@pytest.mark.parametrize("size", SIZES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("value", [3.0, 0.37, -1.25, 1.0])
def test_the_kernel_writes_what_the_pointwise_product_writes(dtype, size, value):
    generator = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr((dtype, size, value)).encode()))
    grad = torch.randn(size, device="cuda", generator=generator).to(dtype)
    factor = torch.tensor(value, device="cuda")
    want = liger_head_op._scaled(grad, factor)
    got = scale(grad.clone(), factor)
    assert got.dtype == dtype and torch.equal(got, want)


def test_at_one_the_gradient_is_left_as_it_is():
    """NaN and infinities included: nothing is read or written."""
    grad = torch.tensor([float("nan"), float("inf"), -0.0, 1e-40, 3.0], device="cuda")
    before = grad.clone()
    scale(grad, torch.tensor(1.0, device="cuda"))
    assert torch.equal(grad.isnan(), before.isnan()) and torch.equal(grad.nan_to_num(), before.nan_to_num())
    assert torch.equal(grad.signbit(), before.signbit())


@pytest.mark.parametrize("grad", ["strided", "float64"])
def test_a_gradient_the_kernel_does_not_take_is_scaled_by_torch_s_ops(grad):
    base = torch.randn(64, 32, device="cuda", dtype=torch.float64 if grad == "float64" else torch.bfloat16)
    tensor = base if grad == "float64" else base.t()
    factor = torch.tensor(0.37, device="cuda")
    want = liger_head_op._scaled(tensor.clone(), factor)
    assert torch.equal(scale(tensor, factor), want)
