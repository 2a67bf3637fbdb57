"""What AOTAutograd and Inductor find a user Triton kernel writes: only the tensors it
stores to, with no warning, when the kernel treats a scalar argument as a run-time
value (``s.to(tl.float32)``, as Liger's cross-entropy kernel does with its class-weight
sum and softcap).

The analysis compiles the kernel to Triton IR, which needs Triton but no GPU: Triton's
driver is asked for a GPU target only (``analysis.analysis_target``)."""

import logging
import types

import pytest
import torch
import torch._inductor.compile_fx  # noqa: F401  (the features here apply once Inductor is imported)
from torch._higher_order_ops import triton_kernel_wrap as tkw
from torch.fx.experimental.proxy_tensor import make_fx

import inductor_addmm_fix
from inductor_addmm_fix.triton_kernels import analysis

needs_triton = pytest.mark.skipif(not analysis.triton_available(), reason="needs triton")
FAILED = "Encountered an exception in identify_"  # torch's warning: "... assuming every input is mutated"


def written(kernel, arguments: dict) -> list[str]:
    """The arguments the installed torch's analysis finds ``kernel`` writes, in order."""
    with analysis_target():
        identify = getattr(tkw, "identify_mutated_tensors", None)
        if identify is not None:  # torch 2.8-2.11
            return list(identify(kernel, arguments, {}))
        accesses = tkw.identify_accessed_tensors(kernel, arguments, {})  # torch 2.12+
        names = {dep.name for dep in accesses.read_writes.writes}
        return [name for name in arguments if name in names]


def analysis_target():
    return analysis.analysis_target()


@pytest.fixture
def torch_warnings(caplog):
    """The warnings torch's Triton kernel analysis logs."""
    caplog.set_level(logging.WARNING, logger=tkw.log.name)
    return lambda: [r.getMessage() for r in caplog.records if r.name == tkw.log.name]


def kernels():
    """Kernels that treat a float, an int, a stride as run-time scalars."""
    import triton
    import triton.language as tl

    @triton.jit
    def add_int(x_ptr, out_ptr, n, k, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) + k.to(tl.float32), mask=i < n)

    @triton.jit
    def strided_copy(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(out_ptr + i * stride, tl.load(x_ptr + i, mask=i < n), mask=i < n)

    return types.SimpleNamespace(add_int=add_int, strided_copy=strided_copy)


def vectors(**scalars) -> dict:
    return {"x_ptr": torch.zeros(8), "out_ptr": torch.zeros(16), "n": 8, **scalars, "BLOCK": 8}


# ---------------------------------------------------------------- what the analysis finds
@needs_triton
def test_a_kernel_calling_to_on_a_float_argument_writes_its_output_alone(torch_warnings):
    assert written(analysis.probe_kernel(), analysis.probe_arguments()) == ["out_ptr"]
    assert not [m for m in torch_warnings() if FAILED in m]


@needs_triton
def test_a_kernel_calling_to_on_an_int_argument_writes_its_output_alone(torch_warnings):
    assert written(kernels().add_int, vectors(k=3)) == ["out_ptr"]
    assert not [m for m in torch_warnings() if FAILED in m]


@needs_triton
def test_a_stride_in_a_store_address_is_not_reported_written():
    assert written(kernels().strided_copy, vectors(stride=2)) == ["out_ptr"]


@needs_triton
def test_a_functionalized_kernel_copies_only_the_tensor_it_writes():
    """AOTAutograd's form of the kernel call: the arguments it copies before the kernel."""

    def launch(x, out):
        kernel = tkw.kernel_side_table.add_kernel(analysis.probe_kernel())
        constants = tkw.kernel_side_table.add_constant_args({"s": 2.5, "BLOCK": 8})
        tkw.triton_kernel_wrapper_mutation(
            kernel_idx=kernel, constant_args_idx=constants, grid=[(1, 1, 1)], tma_descriptor_metadata={},
            kwargs={"x_ptr": x, "out_ptr": out, "n": 8},
        )
        return out

    with analysis_target():
        gm = make_fx(torch.func.functionalize(launch), tracing_mode="fake")(torch.zeros(8), torch.zeros(8))
    (call,) = gm.graph.find_nodes(op="call_function", target=tkw.triton_kernel_wrapper_functional)
    assert call.kwargs["tensors_to_clone"] == ["out_ptr"]


@needs_triton
@pytest.mark.parametrize("weighted, softcap", [(True, None), (False, 30.0), (True, 30.0)], ids=["class-weights", "softcap", "both"])
def test_liger_s_cross_entropy_kernel_writes_its_logits_and_losses_alone(torch_warnings, weighted, softcap):
    ce = pytest.importorskip("liger_kernel.ops.cross_entropy", reason="needs liger-kernel")
    t = torch.zeros(4)
    arguments = dict(
        X_ptr=torch.zeros(4, dtype=torch.bfloat16), X_stride=64, Y_ptr=torch.zeros(4, dtype=torch.int64), Y_stride=1,
        weight_ptr=t.clone() if weighted else None, loss_ptr=t.clone(), z_loss_ptr=None, loss_stride=1,
        token_accuracy_ptr=None, token_accuracy_stride=0, predicted_tokens_ptr=None, predicted_tokens_stride=0,
        n_cols=64, n_non_ignore=10, sum_non_ignore_weight=3.5, weight_sum=7.0, ignore_index=-100,
        lse_square_scale=0.0, label_smoothing=0.0, reduction="mean", softcap=softcap,
        RETURN_Z_LOSS=False, RETURN_TOKEN_ACCURACY=False, RETURN_PREDICTED_TOKENS=False, BLOCK_SIZE=64,
        HAS_WEIGHT=weighted, HAS_SOFTCAPPING=softcap is not None, HAS_GRADIENTS=True,
    )  # fmt: skip
    kernel_arguments = [name for name in ce.liger_cross_entropy_kernel.arg_names]
    arguments = {name: arguments[name] for name in kernel_arguments}
    assert written(ce.liger_cross_entropy_kernel, arguments) == ["X_ptr", "loss_ptr"]
    assert not [m for m in torch_warnings() if FAILED in m]


@needs_triton
def test_without_the_feature_the_analysis_fails_and_takes_every_tensor_as_written(torch_warnings):
    if not analysis.analysis_compiles_scalars_as_constants():
        pytest.skip("this torch compiles scalar arguments as arguments (pytorch/pytorch#169782)")
    inductor_addmm_fix.install(features="-triton_analysis")
    assert written(analysis.probe_kernel(), analysis.probe_arguments()) == ["x_ptr", "out_ptr"]
    assert [m for m in torch_warnings() if FAILED in m]


# ---------------------------------------------------------------- the pieces
def fake_kernel(*params: str):
    """A kernel's ``arg_names`` and ``params``; a name ending in ``:c`` is a constexpr."""
    names = [p.removesuffix(":c") for p in params]
    return types.SimpleNamespace(
        arg_names=names, params=[types.SimpleNamespace(is_constexpr=p.endswith(":c")) for p in params]
    )


def test_scalar_arguments_are_named_in_the_kernel_s_order():
    fn = fake_kernel("x", "n", "desc", "scale", "opt", "BLOCK:c")
    arguments = {"x": torch.zeros(1), "n": 3, "desc": torch.zeros(1), "scale": 2.0, "opt": None, "BLOCK": 8}
    tensors = ["x", "desc", "desc STRIDE PLACEHOLDER 0", "desc SIZE PLACEHOLDER 0"]
    assert analysis.argument_names(fn, arguments, tensors) == [
        "x", "n", "desc", "desc STRIDE PLACEHOLDER 0", "desc SIZE PLACEHOLDER 0", "scale",
    ]  # fmt: skip


def test_a_list_that_names_the_scalars_already_is_kept():
    fn = fake_kernel("x", "n", "BLOCK:c")
    assert analysis.argument_names(fn, {"x": torch.zeros(1), "n": 3, "BLOCK": 8}, ["x", "n"]) == ["x", "n"]


def test_only_scalar_names_are_taken_out_of_what_is_written():
    identify = analysis.written_tensors_only(lambda kernel, kwargs, tma: ["x", "stride", "d STRIDE PLACEHOLDER 0"])
    assert identify(None, {"x": torch.zeros(1), "stride": 2}, {}) == ["x", "d STRIDE PLACEHOLDER 0"]


@needs_triton
def test_the_analysis_target_leaves_triton_s_driver_as_it_was():
    from triton.runtime import driver

    before = dict(vars(driver))
    with analysis_target():
        assert vars(driver) != before
    assert vars(driver) == before
