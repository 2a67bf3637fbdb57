"""Dynamo answers ``hasattr``, ``getattr`` with a default and plain class attributes of an
autograd Function as constants, guarded: no graph break, and a change of the attribute
compiles again."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.compile_fx  # noqa: F401  (the feature applies once Inductor is imported)
from torch._dynamo.utils import counters

from helpers import graph_breaks, liger_mimic


def function_class():
    """A fresh autograd Function with a plain flag, a string and a method."""

    class Doubled(torch.autograd.Function):
        flag = True
        label = "doubled"

        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    return Doubled


def asks(cls):
    def f(x):
        y = cls.apply(x)
        if getattr(cls, "flag", False):
            y = y + 1
        if getattr(cls, "missing", False):
            y = y + 10
        if hasattr(cls, "label") and cls.label == "doubled":
            y = y + 100
        return y + (cls.flag if hasattr(cls, "flag") else 1000)

    return f


@pytest.fixture(autouse=True)
def fresh_counters():
    counters.clear()


def compiled_and_eager(cls, x):
    f = asks(cls)
    return torch.compile(f, backend="eager", fullgraph=False)(x), f(x)


def test_hasattr_getattr_with_a_default_and_plain_attributes_trace_in_one_graph():
    cls = function_class()
    got, want = compiled_and_eager(cls, torch.randn(5, requires_grad=True))
    assert torch.equal(got, want)
    assert graph_breaks() == 0
    assert counters["stats"]["unique_graphs"] == 1


def test_the_gradient_flows_through_the_function():
    cls = function_class()
    x = torch.randn(5, requires_grad=True)
    torch.compile(asks(cls), backend="eager")(x).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 2.0))


@pytest.mark.parametrize("change", ["set", "delete"])
def test_a_changed_class_attribute_compiles_again(change):
    cls = function_class()
    f = torch.compile(asks(cls), backend="eager")
    x = torch.randn(5)
    f(x)
    if change == "set":
        cls.flag = False
    else:
        del cls.flag
    assert torch.equal(f(x), asks(cls)(x))
    assert counters["stats"]["unique_graphs"] == 2


@pytest.mark.features("-function_attributes")
def test_without_the_feature_hasattr_breaks_the_graph():
    cls = function_class()
    got, want = compiled_and_eager(cls, torch.randn(5))
    assert torch.equal(got, want)
    assert graph_breaks() > 0


def test_liger_s_functional_entry_joins_the_graph():
    """Liger 0.8.5's ``liger_fused_linear_cross_entropy`` asks its Function
    ``getattr(..., "supports_inner_impl_dispatch", False)`` before ``apply``."""
    with liger_mimic() as liger:
        x, w = torch.randn(24, 16, requires_grad=True), torch.randn(64, 16, requires_grad=True)
        t = torch.randint(0, 64, (24,))
        torch.compile(lambda x, w, t: liger.flce(torch.tanh(x), w, t)[0])(x, w, t).backward()
    assert graph_breaks() == 0
    assert counters["stats"]["unique_graphs"] == 1


def test_numbers_read_from_the_class_follow_their_changes():
    cls = function_class()
    cls.scale, cls.count = 0.5, 3

    def f(x):
        return cls.apply(x) * cls.scale + cls.count

    compiled = torch.compile(f, backend="eager")
    x = torch.randn(4)
    for scale, count in ((0.5, 3), (0.25, 3), (0.125, 4), (2.0, 5)):
        cls.scale, cls.count = scale, count
        assert torch.equal(compiled(x), f(x)), (scale, count)
    assert graph_breaks() == 0
