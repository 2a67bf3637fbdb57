"""Accumulation chains (FLCE's ``addmm(acc, ..., out=acc)``, with and without
out_dtype) run in place, with no buffer per chunk, and match float64; anything else
keeps the functional lowering."""

import pytest
import torch

from helpers import allocations as allocations_of
from helpers import compile_and_run
from workloads import accumulate_in_chunks

from inductor_addmm_fix.inductor.reinplace import fallback_kernel_runs_out_variants

# One in-place accumulation per chunk: accumulate_pairs (test_accumulate_pairs.py) off.
pytestmark = pytest.mark.features("-accumulate_pairs")

V, H, BT, CHUNK = 48, 40, 64, 16


def chunks(grad_weight, g, x, **kwargs):
    return accumulate_in_chunks(grad_weight, g, x, CHUNK, **kwargs)


def allocations(code: str, shape=(V, H)) -> int:
    return allocations_of(code, shape)


def operands(low=torch.bfloat16):
    return torch.randn(BT, V, dtype=low), torch.randn(BT, H, dtype=low)


def reference(start, g, x):
    return start.double() + g.double().t() @ x.double()


@pytest.mark.parametrize("accumulator", ["zeros inside the graph", "graph input"])
def test_out_dtype_accumulation_runs_in_place(accumulator):
    g, x = operands()
    if accumulator == "graph input":
        start = torch.randn(V, H)
        buf = start.clone()
        compiled = compile_and_run(lambda b, g, x: chunks(b, g, x, out_dtype=torch.float32), buf, g, x)
        assert compiled.result is buf
        assert allocations(compiled.code) == 0  # written straight into the user's buffer
    else:
        start = torch.zeros(V, H)

        def fn(g, x):
            return chunks(torch.zeros(V, H), g, x, out_dtype=torch.float32) * 1.0

        compiled = compile_and_run(fn, g, x)
        buf = compiled.result
        assert allocations(compiled.code) <= 2  # the accumulator (and the returned product)
    assert compiled.counts.get("addmm.dtype:accumulate_in_place") == BT // CHUNK, compiled.counts
    assert "addmm.dtype:product_then_epilogue" not in compiled.counts
    assert compiled.code.count("addmm_.default(") + compiled.code.count("out=") >= BT // CHUNK
    err = ((buf.double() - reference(start, g, x)).norm() / reference(start, g, x).norm()).item()
    assert err < 1e-5


@pytest.mark.parametrize("accumulator", ["zeros inside the graph", "graph input"])
def test_same_dtype_accumulation_runs_in_place_with_eagers_kernel(accumulator):
    g, x = operands()
    if accumulator == "graph input":
        start = torch.randn(V, H, dtype=torch.bfloat16)
        buf = start.clone()
        compiled = compile_and_run(chunks, buf, g, x)
        assert compiled.result is buf
        assert allocations(compiled.code) == 0  # written straight into the user's buffer
        if fallback_kernel_runs_out_variants():
            # addmm.out returns the buffer itself: no parameter-sized copy back into it.
            assert "copy_" not in compiled.code, compiled.code
    else:
        start = torch.zeros(V, H, dtype=torch.bfloat16)
        compiled = compile_and_run(lambda g, x: chunks(torch.zeros(V, H, dtype=torch.bfloat16), g, x), g, x)
        assert allocations(compiled.code) == 1
    kernel = "torch.ops.aten.addmm.out(" if fallback_kernel_runs_out_variants() else "torch.ops.aten.addmm_.default("
    assert compiled.code.count(kernel) == BT // CHUNK
    assert compiled.counts.get("addmm:accumulate_in_place") == BT // CHUNK, compiled.counts
    ref = reference(start, g, x)
    assert ((compiled.result.double() - ref).norm() / ref.norm()).item() < 1e-2  # bf16 result


def test_a_bias_read_later_is_not_overwritten():
    g, x = operands()
    bias = torch.randn(V, H)

    def fn(bias, g, x):
        out = torch.addmm(bias, g.t(), x, out_dtype=torch.float32)
        return out, bias * 2  # the old value is still needed

    compiled = compile_and_run(fn, bias.clone(), g, x)
    out, doubled = compiled.result
    assert "addmm.dtype:accumulate_in_place" not in compiled.counts
    torch.testing.assert_close(doubled, bias * 2)
    assert ((out.double() - reference(bias, g, x)).norm() / reference(bias, g, x).norm()).item() < 1e-5


def test_a_broadcast_bias_is_not_used_as_the_output_buffer():
    g, x = operands()

    def fn(g, x):
        bias = torch.zeros(H)
        return torch.addmm(bias, g.t(), x, out_dtype=torch.float32)

    compiled = compile_and_run(fn, g, x)
    assert "addmm.dtype:accumulate_in_place" not in compiled.counts
    assert compiled.result.shape == (V, H)
    ref = reference(torch.zeros(V, H), g, x)
    assert ((compiled.result.double() - ref).norm() / ref.norm()).item() < 1e-5


def test_a_graph_input_without_out_is_left_untouched():
    g, x = operands()
    bias = torch.randn(V, H)
    before = bias.clone()
    compiled = compile_and_run(lambda b, g, x: torch.addmm(b, g.t(), x, out_dtype=torch.float32), bias, g, x)
    assert torch.equal(bias, before)
    assert "addmm.dtype:accumulate_in_place" not in compiled.counts


def accumulate_into_fp32(grad_weight, grad_logits, x, chunk):
    return accumulate_in_chunks(grad_weight, grad_logits, x, chunk, out_dtype=torch.float32)


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("bt,v,h,chunk", [(64, 48, 40, 16), (47, 123, 31, 16), (8, 32, 16, 8)])
def test_chunked_accumulation_into_an_fp32_buffer(bt, v, h, chunk, low):
    """Liger FLCE's weight-gradient pattern: bf16/fp16 products accumulated into an fp32
    buffer with addmm(..., out_dtype=fp32, out=buffer), ragged last chunk included."""
    grad_logits = torch.randn(bt, v, dtype=low)
    x = torch.randn(bt, h, dtype=low)
    start = torch.randn(v, h)
    grad_weight = start.clone()
    compiled = compile_and_run(accumulate_into_fp32, grad_weight, grad_logits, x, chunk)
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
    fn = torch.compile(accumulate_into_fp32, backend="inductor", fullgraph=True)
    for _ in range(3):
        fn(grad_weight, grad_logits, x, 8)
    ref = 3 * (grad_logits.double().t() @ x.double())
    assert ((grad_weight.double() - ref).norm() / ref.norm()).item() < 1e-5


def test_the_out_variant_probe_finds_what_each_release_can_emit():
    """Inductor's FallbackKernel runs aten out= ops from torch 2.11 (a behaviour probe
    lowers addmm.out into a scratch graph; it must not fail silently)."""
    from packaging.version import Version

    assert fallback_kernel_runs_out_variants() is (Version(torch.__version__).release >= (2, 11))
