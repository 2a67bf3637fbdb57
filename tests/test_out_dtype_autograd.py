"""Torch defines no derivative for the out_dtype overloads, and compiled code keeps
eager's contract: a function whose input requires grad compiles and runs its forward;
``backward()`` raises a RuntimeError that names the op, says why, and what to do
instead.  Eager mode keeps torch's own autograd kernel."""

import warnings

import pytest
import torch

from cases import OPS, eager_fn, make_operands, relative_error
from inductor_addmm_fix.core import no_derivative, probes

M, K, N = 6, 10, 7


def operands_requiring_grad(op):
    """bf16 operands (an fp32 bias), the first matrix operand a leaf that requires grad."""
    operands = list(make_operands(op, M, K, N, torch.bfloat16, bias_dtype=torch.float32))
    operands[-2].requires_grad_()
    return operands


@pytest.mark.parametrize("op", OPS, ids=str)
def test_the_forward_compiles_and_backward_raises_naming_the_op(op):
    operands = operands_requiring_grad(op)
    compiled = torch.compile(eager_fn(op, out_dtype=torch.float32), backend="inductor", fullgraph=True)
    result = compiled(*operands)
    assert result.dtype == torch.float32 and result.requires_grad
    assert relative_error(result.detach(), op.reference([t.detach() for t in operands], torch.float32)) < 1e-5
    with pytest.raises(RuntimeError) as error:
        result.sum().backward()
    assert str(error.value) == no_derivative.message(f"{op.name}.dtype")


@pytest.mark.parametrize("op", OPS, ids=str)
def test_the_out_variant_raises_at_backward_too(op):
    operands = operands_requiring_grad(op)
    fn = eager_fn(op, out_dtype=torch.float32, use_out=True)
    if not op.has_bias:  # addmm/baddbmm accumulate into their bias, as FLCE does
        operands.append(torch.empty(op.operand_shapes(M, K, N)[2]))
    result = torch.compile(fn, backend="inductor", fullgraph=True)(*operands)
    assert result.requires_grad
    with pytest.raises(RuntimeError) as error:
        result.sum().backward()
    assert str(error.value) == no_derivative.message(f"{op.name}.dtype_out")


def test_the_message_says_why_and_what_to_do_instead():
    text = no_derivative.message("addmm.dtype")
    assert text.startswith("derivative for aten::addmm.dtype is not implemented: ")  # eager's words
    assert "torch defines no derivative for the out_dtype= overloads" in text
    assert "torch.addmm(c, a, b).float() or torch.addmm(c, a.float(), b.float())" in text
    assert "torch.autograd.Function with its own backward" in text


@pytest.mark.parametrize("op", OPS, ids=str)
def test_under_no_grad_inputs_that_require_grad_give_a_plain_result(op):
    operands = operands_requiring_grad(op)
    compiled = torch.compile(eager_fn(op, out_dtype=torch.float32), backend="inductor", fullgraph=True)
    with torch.no_grad():
        result = compiled(*operands)
    assert not result.requires_grad and result.grad_fn is None
    assert relative_error(result, op.reference([t.detach() for t in operands], torch.float32)) < 1e-5


class _ProductWithItsOwnBackward(torch.autograd.Function):
    """The workaround the message names: out_dtype in the forward, a backward of casts."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return torch.mm(a, b, out_dtype=torch.float32)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (grad @ b.float().t()).to(a.dtype), (a.float().t() @ grad).to(b.dtype)


def test_an_autograd_function_with_its_own_backward_trains():
    a = torch.randn(M, K).to(torch.bfloat16).requires_grad_()
    b = torch.randn(K, N).to(torch.bfloat16).requires_grad_()
    compiled = torch.compile(_ProductWithItsOwnBackward.apply, backend="inductor", fullgraph=True)
    compiled(a, b).sum().backward()
    ones = torch.ones(M, N, dtype=torch.float64)
    assert relative_error(a.grad, ones @ b.detach().double().t()) < 8e-3
    assert relative_error(b.grad, a.detach().double().t() @ ones) < 8e-3


def test_eager_mode_keeps_torchs_own_autograd_kernel():
    """Eager (meta tensors: the CPU has no eager kernel) runs the forward and raises
    torch's error at backward, as before: the package's kernel is for tracing only."""
    a = torch.empty(M, K, device="meta", dtype=torch.bfloat16, requires_grad=True)
    b = torch.empty(K, N, device="meta", dtype=torch.bfloat16)
    result = torch.mm(a, b, out_dtype=torch.float32)
    assert type(result.grad_fn).__name__ == "NotImplemented"
    with pytest.raises(RuntimeError, match=r"^derivative for aten::mm is not implemented$"):
        result.sum().backward()


def test_the_probe_finds_a_derivative_where_torch_defines_one():
    """A derivative registered for mm.dtype (as a torch that defines one would have)."""
    assert probes.has_no_derivative("mm.dtype")

    class Derivative(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, out_dtype):
            with torch._C._AutoDispatchBelowAutograd():
                return torch.ops.aten.mm.dtype(a, b, out_dtype)

        @staticmethod
        def backward(ctx, grad):
            return grad, grad, None

    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": on purpose
            library.impl("mm.dtype", Derivative.apply, "Autograd", allow_override=True)
        assert not probes.has_no_derivative("mm.dtype")
    finally:
        library._destroy()
    assert probes.has_no_derivative("mm.dtype")


def test_a_torch_with_derivatives_gets_no_autograd_kernel(monkeypatch):
    monkeypatch.setattr(no_derivative, "has_no_derivative", lambda qualname: False)
    decisions = no_derivative.plan()
    assert [d.name for d in decisions] == [f"core.no_derivative.{name}.dtype" for name in probes.FAMILY]
    assert not any(d.needed or d.patches for d in decisions)
