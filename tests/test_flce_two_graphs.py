"""FLCE as Dynamo's default config compiles Liger's: the gradient buffers are made before
an ``.item()`` graph break, so the chunk loop's graph receives them as inputs and must
write them in place.  Issue 8: no buffer of their size in that graph, no copy back."""

from __future__ import annotations

import re

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

from inductor_addmm_fix import tier2_inductor_post_grad as t2p
from inductor_addmm_fix.tier2_inductor_lowerings import COUNTER
from inductor_addmm_fix.tier2_inductor_reinplace import fallback_kernel_runs_out_variants

pytestmark = pytest.mark.skipif(not t2p.supported(), reason="no post_grad_custom_post_pass in this torch")

BT, H, V, CHUNK = 48, 16, 40, 4  # 12 chunks


def flce_with_a_graph_break(x, w, target):
    """Liger 0.8.5's forward, reduced: buffers, an .item() (a graph break under the
    default config), then per chunk the logits, their gradient, grad_input written
    through mm(out=slice) and grad_weight accumulated with addmm(out=grad_weight)."""
    grad_input = torch.zeros_like(x)
    grad_weight = torch.zeros_like(w)
    n_valid = (target >= 0).sum().item()
    loss = x.new_zeros((), dtype=torch.float32)
    for start in range(0, BT, CHUNK):
        x_k = x[start : start + CHUNK]
        logits = x_k @ w.t()
        onehot = torch.nn.functional.one_hot(target[start : start + CHUNK], V).to(logits.dtype)
        g = (torch.softmax(logits, -1) - onehot) / n_valid
        loss = loss + (torch.logsumexp(logits, -1) - (logits * onehot).sum(-1)).sum() / n_valid
        torch.mm(g, w, out=grad_input[start : start + CHUNK])
        torch.addmm(grad_weight, g.t(), x_k, out=grad_weight)
    return loss, grad_input, grad_weight


def loop_graph_code(codes: list[str]) -> str:
    loops = [c for c in codes if c.count("extern_kernels.mm(") >= BT // CHUNK]
    assert len(loops) == 1, [c[:200] for c in codes]
    return loops[0]


def test_the_loop_graph_writes_both_gradient_buffers_in_place():
    x, w = torch.randn(BT, H), torch.randn(V, H) / 4
    target = torch.randint(V, (BT,))
    torch._dynamo.reset()
    counters[COUNTER].clear()
    with torch._inductor.config.patch(force_disable_caches=True):
        (loss, grad_input, grad_weight), codes = run_and_get_code(torch.compile(flce_with_a_graph_break), x, w, target)
    assert len(codes) >= 2  # the graph break happened
    code = loop_graph_code(codes)
    assert counters[COUNTER]["slice_writes:in_place"] == 1
    # Neither gradient's size is allocated in the loop graph: both are written in place.
    for shape in ((BT, H), (V, H)):
        assert not re.search(rf"empty_strided_\w+\({re.escape(str(shape))}", code), shape
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
    expected = flce_with_a_graph_break(x.double(), w.double(), target)
    for got, want in zip((loss, grad_input, grad_weight), expected):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
