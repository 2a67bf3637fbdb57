"""A user Triton kernel whose loop-carried value takes a float argument's type (Liger's
KL-div kernel: ``m = tl.maximum(m, tl.max(x / temperature))``) compiles under Inductor
and gives eager's results bit for bit: the float is fp32, as Triton's JIT makes it."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


@triton.jit
def _scaled_row_max(x_ptr, out_ptr, n_cols, temperature, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = float("-inf")
    for start in range(0, n_cols, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + offsets, mask=offsets < n_cols, other=float("-inf")).to(tl.float32)
        m = tl.maximum(m, tl.max(x / temperature, axis=0))
    tl.store(out_ptr + row, m)


def scaled_row_max(x, temperature):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    _scaled_row_max[(x.shape[0],)](x, out, x.shape[1], temperature, BLOCK=256)
    return out


def with_a_literal(x):
    return scaled_row_max(x, 3.0)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_float_literal_argument_compiles_and_matches_eager(dynamic):
    x = torch.randn(8, 1000, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(torch.compile(with_a_literal, dynamic=dynamic)(x), with_a_literal(x))


def test_a_float_argument_of_the_frame_compiles_and_matches_eager():
    compiled = torch.compile(scaled_row_max)
    for temperature in (0.7, 1.3, 3.0):
        x = torch.randn(8, 1000, device="cuda", dtype=torch.bfloat16)
        assert torch.equal(compiled(x, temperature), scaled_row_max(x, temperature))


def with_a_scale_of_the_row_count(x):
    return scaled_row_max(x, 1.0 / x.shape[0])  # Liger's KL-div: scale = 1 / BT


def test_a_float_computed_from_a_symbolic_size_compiles_and_matches_eager():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(with_a_scale_of_the_row_count, dynamic=True)
    for rows in (8, 24, 40):
        x = torch.randn(rows, 1000, device="cuda", dtype=torch.bfloat16)
        assert torch.equal(compiled(x), with_a_scale_of_the_row_count(x))
    assert counters["stats"]["unique_graphs"] == 1  # one graph, its row count symbolic
