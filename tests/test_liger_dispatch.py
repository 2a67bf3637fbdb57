"""Under ``INDUCTOR_ADDMM_FIX_LIGER_HEAD=loop``, Liger's JSD and KL-div chunk loops are
compiled: Dynamo traces the implementation their ``torch.compiler.disable``d
``dispatch`` resolves.  Under ``auto`` and ``opaque`` the loops stay eager, as stock.

On the CPU, Liger's dispatch module is ``tests/liger_dispatch_mimic.py`` (a KL-div loop
through a disabled ``dispatch``, imported under Liger's module name)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from helpers import graph_breaks, liger_dispatch_mimic
from inductor_addmm_fix.patching.counters import COUNTER

ROWS, H, V = 24, 16, 64  # chunks of 8 rows: 3 per call (a first, a middle and a last one)


@pytest.fixture
def dispatch_module():
    with liger_dispatch_mimic() as module:
        yield module


@pytest.fixture(autouse=True)
def fresh_counters():
    counters.clear()


def inputs(dtype=torch.float64):
    x = torch.randn(ROWS, H, dtype=dtype)
    w = torch.randn(V, H, dtype=dtype) * 0.3
    target = torch.softmax(torch.randn(ROWS, V, dtype=torch.float64), -1).to(dtype)
    return x, w, target


def ran_eagerly(module) -> bool:
    """Dynamo skipped the loop's frame (a graph break in a loop) and it ran eagerly,
    dispatching each chunk: what stock torch does with Liger's loops."""
    return counters["stats"]["unique_graphs"] == 0 and module.CALLS == ["kl_loss_and_grad"] * (ROWS // 8)


def events(name: str) -> int:
    return counters[COUNTER].get(f"liger_head:{name}", 0)


def test_the_loop_setting_compiles_the_kl_div_loop_in_one_graph(dispatch_module, head_mode):
    head_mode("loop")
    x, w, target = inputs()
    got = torch.compile(dispatch_module.chunked_kl)(x, w, target)
    assert graph_breaks() == 0
    assert counters["stats"]["unique_graphs"] == 1
    assert events("dispatch:traced") == ROWS // 8
    dispatch_module.CALLS.clear()
    want = dispatch_module.chunked_kl(x, w, target)
    assert dispatch_module.CALLS == ["kl_loss_and_grad"] * (ROWS // 8)  # eager still dispatches
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_the_compiled_loop_matches_float64_in_float32(dispatch_module, head_mode):
    head_mode("loop")
    x, w, target = inputs(torch.float32)
    got = torch.compile(dispatch_module.chunked_kl)(x, w, target)
    want = dispatch_module.chunked_kl(x.double(), w.double(), target.double())
    for a, b in zip(got, want):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["auto", "opaque"])
def test_other_settings_leave_the_loop_eager_as_stock(dispatch_module, head_mode, mode):
    head_mode(mode)
    x, w, target = inputs()
    got = torch.compile(dispatch_module.chunked_kl)(x, w, target)
    assert ran_eagerly(dispatch_module)
    assert events("dispatch:traced") == 0
    for a, b in zip(got, dispatch_module.chunked_kl(x, w, target)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call", ["other_op", "impl_given"])
def test_a_call_it_does_not_know_keeps_the_graph_break(dispatch_module, head_mode, call):
    head_mode("loop")
    if call == "other_op":
        dispatch_module.REGISTRY["other_op"] = dispatch_module.REGISTRY["kl_loss_and_grad"]
        kwargs = {"op": "other_op"}
    else:
        kwargs = {"impl": "nvidia-triton"}
    x, w, target = inputs()
    torch.compile(lambda x, w, t: dispatch_module.chunked_kl(x, w, t, **kwargs))(x, w, target)
    assert counters["stats"]["unique_graphs"] == 0  # the loop's frame skipped, as stock
    assert events("dispatch:traced") == 0


def test_an_implementation_registered_as_an_autograd_function_keeps_the_graph_break(dispatch_module, head_mode):
    head_mode("loop")
    dispatch_module.REGISTRY["kl_loss_and_grad"] = dispatch_module.OpImpl(
        dispatch_module.kl_loss_and_grad, autograd_function=object
    )
    x, w, target = inputs()
    torch.compile(dispatch_module.chunked_kl)(x, w, target)
    assert ran_eagerly(dispatch_module)
    assert events("dispatch:skipped") > 0
