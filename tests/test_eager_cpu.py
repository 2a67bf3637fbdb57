"""Eager mode has no CPU kernel for the out_dtype overloads.  A call that runs eagerly on
the CPU (an ``out=`` that Dynamo leaves to eager, a backend that runs graphs eagerly, no
torch.compile at all) raises NotImplementedError naming the op and the cause its
arguments show, where the dispatcher's "Could not run ... from the 'CPU' backend" named
none."""

import re

import pytest
import torch

import inductor_addmm_fix as fix
from cases import OPS
from inductor_addmm_fix.core import eager_cpu, probes

M, K, N = 4, 8, 3


def result_shape(op):
    return list(op.operand_shapes(M, K, N, batch=2)[2])


def operands(op):
    a_shape, b_shape, c_shape = op.operand_shapes(M, K, N, batch=2)
    a, b = torch.randn(a_shape).bfloat16(), torch.randn(b_shape).bfloat16()
    return (torch.randn(c_shape), a, b) if op.has_bias else (a, b)


def into(op):
    def fn(*args):
        op.call(args[:-1], torch.float32, out=args[-1])
        return args[-1]

    return fn


def transposed(shape):
    return torch.empty(*shape[:-2], shape[-1], shape[-2]).transpose(-1, -2)


#: out= buffers that Dynamo does not trace (so the call runs eagerly) -> the cause named
UNTRACED = {
    "transposed": (transposed, r"does not trace an out= that is not contiguous: out= has strides \(.*\) \(a transposed or sliced view\)"),
    "sliced": (lambda shape: torch.empty(*shape[:-1], 2 * shape[-1])[..., ::2], r"does not trace an out= that is not contiguous"),
    "empty": (lambda shape: torch.empty(0), r"does not trace an out= it would resize: out= has shape \[0\], the result {shape}"),
    "another shape": (lambda shape: torch.empty(5, 5), r"does not trace an out= it would resize: out= has shape \[5, 5\], the result {shape}"),
}


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized:UserWarning")
@pytest.mark.parametrize("buffer", UNTRACED, ids=str)
@pytest.mark.parametrize("op", OPS, ids=str)
def test_an_out_that_dynamo_leaves_to_eager_names_the_cause(op, buffer):
    make, cause = UNTRACED[buffer]
    shape = result_shape(op)
    compiled = torch.compile(into(op), backend="inductor")
    with pytest.raises(NotImplementedError) as error:
        compiled(*operands(op), make(shape))
    text = str(error.value)
    assert text.startswith(f"eager mode has no CPU kernel for aten::{op.name}.dtype_out (")
    assert "Could not run" not in text
    assert re.search(cause.format(shape=re.escape(str(shape))), text), text


@pytest.mark.parametrize("op", OPS, ids=str)
def test_a_contiguous_out_of_the_result_shape_compiles(op):
    buffer = torch.full(result_shape(op), float("nan"))
    args = operands(op)
    result = torch.compile(into(op), backend="inductor", fullgraph=True)(*args, buffer)
    assert result is buffer and torch.isfinite(buffer).all()


@pytest.mark.parametrize("backend", ["eager", None], ids=["backend=eager", "no torch.compile"])
@pytest.mark.parametrize("op", OPS, ids=str)
def test_a_call_run_eagerly_says_the_cpu_has_no_kernel_and_why_it_ran_eagerly(op, backend):
    fn = lambda *args: op.call(args, torch.float32)  # noqa: E731
    if backend is not None:
        fn = torch.compile(fn, backend=backend, fullgraph=True)
    with pytest.raises(NotImplementedError) as error:
        fn(*operands(op))
    assert str(error.value) == eager_cpu.message(f"{op.name}.dtype")
    assert "after a graph break" in str(error.value) and "fullgraph=True" in str(error.value)


def test_without_the_package_the_dispatcher_names_no_cause():
    """What the kernel replaces: torch's own error, restored by uninstall()."""
    a, b = operands(OPS[0])
    fix.uninstall()
    try:
        assert not probes.eager_cpu_has_kernel("mm.dtype_out")
        with pytest.raises(NotImplementedError, match=r"^Could not run 'aten::mm.dtype_out' with arguments from the 'CPU' backend"):
            torch.mm(a, b, out_dtype=torch.float32, out=torch.empty(0))
    finally:
        fix.install()
    with pytest.raises(NotImplementedError, match=r"^eager mode has no CPU kernel for aten::mm.dtype_out"):
        torch.mm(a, b, out_dtype=torch.float32, out=torch.empty(0))


def test_only_the_cpu_key_is_taken():
    decisions = eager_cpu.plan()
    assert all(d.needed for d in decisions)
    slots = [p.slot for d in decisions for p in d.patches]
    assert len(slots) == 8 and {s.dispatch_key for s in slots} == {"CPU"}


def test_a_torch_with_cpu_kernels_gets_none(monkeypatch):
    monkeypatch.setattr(eager_cpu, "eager_cpu_has_kernel", lambda qualname: True)
    decisions = eager_cpu.plan()
    assert [d.name for d in decisions] == [f"core.eager_cpu.{name}.dtype" for name in probes.FAMILY]
    assert not any(d.needed or d.patches for d in decisions)
