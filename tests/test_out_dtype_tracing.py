"""The out_dtype overloads trace under FakeTensor (Dynamo) for every backend, and
their meta kernels give the right shape, dtype and errors."""

import pytest
import torch

from cases import OPS, eager_fn, make_operands


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("op", OPS, ids=str)
def test_traces_for_non_inductor_backends(op, backend):
    # Meta tensors: the graph runs through the meta kernels, so this works on the
    # CPU, where eager has no kernel for these overloads.
    operands = make_operands(op, 6, 10, 7, torch.bfloat16, bias_dtype=torch.float32, device="meta")
    out = torch.compile(eager_fn(op, out_dtype=torch.float32), backend=backend, fullgraph=True)(*operands)
    assert out.dtype == torch.float32
    assert out.shape == op.operand_shapes(6, 10, 7)[2]


@pytest.mark.parametrize("op", OPS, ids=str)
def test_fake_tensor_propagation_under_the_python_dispatcher(op):
    from torch._dispatch.python import enable_python_dispatcher
    from torch._subclasses.fake_tensor import FakeTensorMode

    operands = make_operands(op, 6, 10, 7, torch.bfloat16, bias_dtype=torch.float32)
    with FakeTensorMode() as mode, enable_python_dispatcher():
        fake = [mode.from_tensor(t) for t in operands]
        out = op.call(fake, torch.float32, **({"beta": 0.5, "alpha": 2.0} if op.has_bias else {}))
    assert out.dtype == torch.float32 and out.shape == op.operand_shapes(6, 10, 7)[2]


@pytest.mark.parametrize(
    "name,operands,message",
    [
        # ours or stock's wording, whichever kernel this torch runs
        ("mm", (torch.empty(2, 3), torch.empty(4, 5)), "cannot be multiplied|same reduction dim"),
        ("mm", (torch.empty(2, 3), torch.empty(3, 5)), None),
        ("bmm", (torch.empty(2, 2, 3), torch.empty(3, 3, 5)), "Expected size"),
        ("addmm", (torch.empty(2, 5), torch.empty(2, 3, dtype=torch.bfloat16), torch.empty(3, 4, dtype=torch.bfloat16)), "broadcast"),
        ("baddbmm", (torch.empty(2, 2, 5), torch.empty(2, 2, 3, dtype=torch.bfloat16), torch.empty(2, 3, 4, dtype=torch.bfloat16)), "broadcast"),
        ("baddbmm", (torch.empty(2, 2, 4, dtype=torch.float16), torch.empty(2, 2, 3, dtype=torch.bfloat16), torch.empty(2, 3, 4, dtype=torch.bfloat16)), "self must have the dtype"),
    ],
)
def test_meta_kernels_reject_invalid_operands(name, operands, message):
    op = getattr(torch.ops.aten, name).dtype
    meta = [t.to("meta") for t in operands]
    if message is None:  # fp32 inputs may not ask for a bf16 result
        with pytest.raises(RuntimeError, match="out_dtype must be the same as input dtype"):
            op(*meta, torch.bfloat16)
    else:
        with pytest.raises(RuntimeError, match=message):
            op(*meta, torch.float32)


def test_a_stand_in_meta_kernel_that_nothing_replaces_raises_instead_of_calling_itself():
    """The stand-in of the Meta key (an eager call on meta tensors before torch._dynamo is
    imported) imports torch._dynamo and calls the op again; where that import applied no
    tracing stage (here: it happened long ago), it says so rather than recursing."""
    from inductor_addmm_fix.core import meta_trigger
    from inductor_addmm_fix.patching.slots import DispatcherKernel

    slot = DispatcherKernel("mm.dtype")
    token = slot.write(meta_trigger.trigger("mm.dtype"))
    try:
        meta = dict(device="meta", dtype=torch.bfloat16)
        with pytest.raises(NotImplementedError, match="did not replace the stand-in Meta kernel of aten::mm.dtype"):
            torch.mm(torch.empty(2, 3, **meta), torch.empty(3, 4, **meta), out_dtype=torch.float32)
    finally:
        slot.unwrite(token, None)
    out = torch.mm(torch.empty(2, 3, device="meta", dtype=torch.bfloat16), torch.empty(3, 4, device="meta",
                   dtype=torch.bfloat16), out_dtype=torch.float32)
    assert out.dtype == torch.float32  # the kernel under it is back
