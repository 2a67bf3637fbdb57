"""Tier 2c: accumulation chains (FLCE's addmm(..., out=buf)) run in place, with
no buffer per chunk; anything else keeps the functional lowering."""

import re

import pytest
import torch

from compile_helpers import compile_and_run

from inductor_addmm_fix.tier2_inductor_reinplace import fallback_kernel_runs_out_variants

V, H, BT, CHUNK = 48, 40, 64, 16


def chunks(grad_weight, g, x, **kwargs):
    for start in range(0, BT, CHUNK):
        torch.addmm(grad_weight, g[start : start + CHUNK].t(), x[start : start + CHUNK], out=grad_weight, **kwargs)
    return grad_weight


def allocations(code: str, shape=(V, H)) -> int:
    return len(re.findall(rf"empty_strided_cpu\({re.escape(str(shape))}", code))


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
