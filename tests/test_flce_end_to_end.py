"""FLCE as Dynamo's default config compiles Liger's: the gradient buffers are made before
an ``.item()`` graph break, so the chunk loop's graph receives them as inputs.  With
every feature on, that graph writes both in place: no buffer of their size, no copy
back, and the results of a float64 run."""

from __future__ import annotations

import re

import pytest
import torch

from helpers import allocations, compile_and_run
from workloads import flce_with_a_graph_break

from inductor_addmm_fix.inductor.passes import post_grad_slot
from inductor_addmm_fix.inductor.reinplace import fallback_kernel_runs_out_variants

pytestmark = [
    pytest.mark.skipif(not post_grad_slot.supported(), reason="no post_grad_custom_post_pass in this torch"),
    # One accumulation per chunk, as eager: accumulate_pairs (test_accumulate_pairs.py) off.
    pytest.mark.features("-accumulate_pairs"),
]

BT, H, V, CHUNK = 12, 16, 40, 4  # 3 chunks (each compiles its own kernels)


def loop_graph_code(codes: list[str]) -> str:
    loops = [c for c in codes if c.count("extern_kernels.mm(") >= BT // CHUNK]
    assert len(loops) == 1, [c[:200] for c in codes]
    return loops[0]


def test_the_loop_graph_writes_both_gradient_buffers_in_place():
    x, w = torch.randn(BT, H), torch.randn(V, H) / 4
    target = torch.randint(V, (BT,))
    compiled = compile_and_run(flce_with_a_graph_break, x, w, target, CHUNK, fullgraph=False)
    loss, grad_input, grad_weight = compiled.result
    assert len(compiled.codes) >= 2  # the graph break happened
    code = loop_graph_code(compiled.codes)
    assert compiled.counts["slice_writes:in_place"] == 1
    # Neither gradient's size is allocated in the loop graph: both are written in place.
    for shape in ((BT, H), (V, H)):
        assert allocations(code, shape) == 0, shape
    if fallback_kernel_runs_out_variants():
        assert code.count("torch.ops.aten.addmm.out(") == BT // CHUNK
        # grad_weight (a graph input) is touched by the accumulations only: no copy back.
        call = code.split("def call(", 1)[1].split("\ndef ", 1)[0]
        (name,) = set(re.findall(r"addmm\.out\(.*out=(arg\d+_1)\)", call))  # grad_weight
        others = [
            line.strip()
            for line in call.splitlines()
            if re.search(rf"\b{name}\b", line)
            and not re.match(rf"\s*(#|assert_|del {name}\b|arg\d+_1(, arg\d+_1)* = args)", line)
            and "torch.ops.aten.addmm.out(" not in line
        ]
        assert others == [], others
    expected = flce_with_a_graph_break(x.double(), w.double(), target, CHUNK)
    for got, want in zip((loss, grad_input, grad_weight), expected):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
