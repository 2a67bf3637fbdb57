"""Liger FLCE's token scaling, as the package's op runs it: the same values without a
boolean index per chunk (``dynamo/liger_token_scaling.py``).

On the CPU, Liger's module is ``tests/liger_flce_mimic.py``, whose token scaling is
Liger 0.8.5's code; where Liger itself is installed, its own forward is rewritten too.
"""

from __future__ import annotations

import importlib.util
import inspect

import pytest
import torch
from torch._dynamo.utils import counters

from helpers import aten_calls, liger_mimic, token_scaling_step
from inductor_addmm_fix.dynamo import liger_head_op, liger_token_scaling
from inductor_addmm_fix.patching.counters import COUNTER

H, V = 16, 128


@pytest.fixture(autouse=True)
def fresh_counters():
    counters.clear()
    liger_head_op.reset_tiers()


def inputs(rows, *, dtype=torch.float32, ignore_index=-100, ignored=slice(None, None, 5), seed=0):
    torch.manual_seed(seed)
    x = torch.randn(rows, H, dtype=dtype).requires_grad_()
    w = (torch.randn(V, H, dtype=dtype) * 0.2).requires_grad_()
    t = torch.randint(0, V, (rows,))
    t[ignored] = ignore_index
    return x, w, t


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "ignore_index, ignored",
    [(-100, slice(None, None, 5)), (-100, slice(0, 24)), (3, slice(None, None, 3)), (-100, slice(0, 0))],
    ids=["some-ignored", "whole-chunks-ignored", "ignore-index-a-class", "none-ignored"],
)
def test_the_rewritten_forward_returns_liger_s_outputs_bit_for_bit(dtype, ignore_index, ignored):
    with liger_mimic() as liger:
        forward = liger.fused_linear_cross_entropy_forward
        rewritten = liger_token_scaling.without_host_syncs(forward)
        assert rewritten is not forward
        x, w, t = inputs(40, dtype=dtype, ignore_index=ignore_index, ignored=ignored)
        options = dict(ignore_index=ignore_index, use_token_scaling=True, return_z_loss=True, lse_square_scale=1e-3)
        for got, want in zip(rewritten(x, w, t, **options), forward(x, w, t, **options)):
            assert (got is None) == (want is None)
            if got is not None:
                assert got.dtype == want.dtype and torch.equal(got, want)


def test_the_rewritten_forward_indexes_no_chunk_with_a_boolean_mask():
    """Liger's boolean indexing runs ``nonzero`` (a host sync on the GPU) for every chunk;
    the rewritten forward runs none."""
    with liger_mimic() as liger:
        forward = liger.fused_linear_cross_entropy_forward
        x, w, t = inputs(40)
        chunks = 5  # next_power_of_2(cdiv(40, cdiv(V, H))) = 8 rows a chunk
        scaled = dict(use_token_scaling=True)
        assert aten_calls(lambda: forward(x, w, t, **scaled))["aten::nonzero"] >= chunks
        calls = aten_calls(lambda: liger_token_scaling.without_host_syncs(forward)(x, w, t, **scaled))
        assert "aten::nonzero" not in calls and "aten::index" not in calls and "aten::index_put_" not in calls


def test_the_rewritten_forward_keeps_liger_s_file_lines_and_signature():
    with liger_mimic() as liger:
        forward = liger.fused_linear_cross_entropy_forward
        rewritten = liger_token_scaling.without_host_syncs(forward)
        assert rewritten.__code__.co_filename == forward.__code__.co_filename
        assert rewritten.__code__.co_firstlineno == forward.__code__.co_firstlineno
        assert inspect.signature(rewritten) == inspect.signature(forward)
        assert (rewritten.__name__, rewritten.__module__) == (forward.__name__, forward.__module__)
        assert rewritten.__globals__ is forward.__globals__


def test_a_forward_written_otherwise_is_left_as_it_is():
    def fused_linear_cross_entropy_forward(_input, weight, target, ignore_index=-100):
        valid_target_mask = target != ignore_index
        valid_targets = target[valid_target_mask]  # not Liger's statement: target, not target_chunk
        return valid_targets

    assert "boolean-mask blocks" in liger_token_scaling.why_not(fused_linear_cross_entropy_forward)
    assert liger_token_scaling.without_host_syncs(fused_linear_cross_entropy_forward) is fused_linear_cross_entropy_forward


def test_compiled_token_scaling_runs_the_op_without_boolean_indexing_and_matches_eager():
    with liger_mimic() as liger:
        step = token_scaling_step(liger)
        compiled = torch.compile(step)
        for seed in range(3):
            x, w, t = inputs(40, seed=seed)
            ex, ew = (v.detach().clone().requires_grad_() for v in (x, w))
            losses = {}
            calls = aten_calls(lambda: losses.update(compiled=compiled(x, w, t)))
            eager_calls = aten_calls(lambda: losses.update(eager=step(ex, ew, t)))
            assert torch.equal(losses["compiled"], losses["eager"])
            assert torch.equal(x.grad, ex.grad) and torch.equal(w.grad, ew.grad)
            assert "aten::nonzero" not in calls and eager_calls["aten::nonzero"] >= 5
    assert counters[COUNTER]["liger_head:run"] == 3  # each step ran the op (trace-time events: torch 2.8 may drop them)


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None, reason="Liger-Kernel is not installed")
def test_liger_s_own_forward_is_rewritten():
    from liger_kernel.ops import fused_linear_cross_entropy as flce

    assert liger_token_scaling.why_not(flce.fused_linear_cross_entropy_forward) is None
