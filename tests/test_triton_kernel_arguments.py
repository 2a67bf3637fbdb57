"""What a user Triton kernel is handed: a copy of the view it writes, not of the storage
around it; and a float argument read at run time, not a constant to recompile for.

No Triton is needed: a stand-in kernel object in torch's kernel side table is enough to
run and trace ``triton_kernel_wrapper_functional``'s decomposition (the graph Inductor
lowers) and to run AOTAutograd's ``tensorify_python_scalars`` on a graph that calls it.
Liger FLCE on CUDA exercises both end to end (``tests/gpu``)."""

import operator

import pytest
import torch
import torch._inductor.compile_fx  # noqa: F401  (the features here apply once Inductor is imported)
import torch.fx as fx
from torch._dynamo.source import ConstantSource
from torch._dynamo.symbolic_convert import TensorifyState
from torch._higher_order_ops import triton_kernel_wrap as tkw
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
from torch.utils._sympy.symbol import SymT, symbol_is_type

import inductor_addmm_fix
from inductor_addmm_fix.triton_kernels import clones

aten = torch.ops.aten


class OddRows:
    """Stands for a Triton kernel ``(out, n)`` that writes 1.0 into the odd rows of ``out``
    and leaves the even rows as they were (Liger leaves its ignore_index rows)."""

    arg_names = ["out", "n"]

    def __getitem__(self, grid):
        def launch(out, n):
            out[1::2] = 1.0

        return launch


def side_table(kernel) -> tuple[int, int]:
    """(kernel index, constant-args index) of ``kernel`` in torch's side table (which
    ``torch._dynamo.reset()`` empties: register at use)."""
    return tkw.kernel_side_table.add_kernel(kernel), tkw.kernel_side_table.add_constant_args({})


def kernel_on_a_view(x, n):
    """The functional form AOTAutograd gives a kernel writing ``x[n:2n]``, decomposed as
    Inductor decomposes it (copy, kernel on the copy)."""
    kernel, constants = side_table(OddRows())
    out = tkw.triton_kernel_wrapper_functional_dense(
        kernel_idx=kernel,
        constant_args_idx=constants,
        grid=[(1, 1, 1)],
        tma_descriptor_metadata={},
        kwargs={"out": x[n : 2 * n], "n": n},
        tensors_to_clone=["out"],
    )
    return out["out"]


def ops(graph: fx.Graph) -> list[str]:
    return [getattr(n.target, "__name__", str(n.target)) for n in graph.nodes if n.op == "call_function"]


def test_a_dense_view_is_copied_alone_with_its_strides():
    base = torch.arange(24.0).reshape(6, 4)
    view = base[2:5]
    copy = clones.copy_of_mutated_view(tkw.clone_preserve_strides)(view)
    assert torch.equal(copy, view) and copy.stride() == view.stride()
    assert copy.storage_offset() == 0
    assert copy.untyped_storage().nbytes() == view.numel() * view.element_size()  # nothing before or after it


def test_views_that_overlap_keep_the_storage_copy():
    view = torch.arange(4.0).expand(3, 4)  # stride 0: a copy of its elements cannot hold the overlap
    copy = clones.copy_of_mutated_view(tkw.clone_preserve_strides)(view)
    assert torch.equal(copy, view) and copy.stride() == view.stride()


@pytest.mark.parametrize("tracing_mode", ["real", "symbolic"])
def test_the_decomposition_inductor_lowers_reads_only_the_view(tracing_mode):
    x = torch.arange(16.0)
    graph = make_fx(lambda x: kernel_on_a_view(x, x.shape[0] // 4), tracing_mode=tracing_mode)(x).graph
    assert "as_strided" not in " ".join(ops(graph))  # stock: as_strided from the storage's start
    assert "sym_storage_offset" not in " ".join(ops(graph))
    assert torch.equal(kernel_on_a_view(x, 4), torch.tensor([4.0, 1.0, 6.0, 1.0]))


def test_without_the_feature_the_copy_starts_at_the_storage():
    if not clones.stock_copy_reads_storage_before_the_view():
        pytest.skip("this torch copies a mutated view alone (pytorch/pytorch#192227)")
    inductor_addmm_fix.install(features="-triton_clones")
    graph = make_fx(lambda x: kernel_on_a_view(x, x.shape[0] // 4), tracing_mode="symbolic")(torch.arange(16.0)).graph
    assert "sym_storage_offset" in " ".join(ops(graph))


# ---------------------------------------------------------------- float arguments
class Scale:
    """Stands for a Triton kernel ``(out, s)`` scaling ``out`` by the float ``s``."""

    arg_names = ["out", "s"]

    def __getitem__(self, grid):
        def launch(out, s):
            out.mul_(s)

        return launch


def graph_passing_an_input_float_to_a_kernel():
    """The AOT graph of ``kernel(out=x, s=f)`` for a float ``f`` that Dynamo made an
    input (a 0-d float64 tensor and its backed SymFloat, as with specialize_float=False)."""
    kernel, constants = side_table(Scale())
    shape_env = ShapeEnv()
    fake_mode = FakeTensorMode(shape_env=shape_env)
    graph = fx.Graph()
    x, f = graph.placeholder("x"), graph.placeholder("f")
    with fake_mode:
        x.meta["val"] = torch.empty(8)
        f.meta["val"] = torch.empty((), dtype=torch.float64)
    source = ConstantSource("f")
    symbol = shape_env.create_symbol(2.5, source, dynamic_dim=DimDynamic.DYNAMIC)
    read = graph.call_function(aten._local_scalar_dense.default, (f,))
    read.meta["val"] = shape_env.create_symfloatnode(symbol, hint=2.5, source=source)
    call = graph.call_function(
        tkw.triton_kernel_wrapper_functional,
        (),
        dict(kernel_idx=kernel, constant_args_idx=constants, grid=[(1, 1, 1)], tma_descriptor_metadata={}, kwargs={"out": x, "s": read}, tensors_to_clone=["out"]),
    )
    with fake_mode:
        call.meta["val"] = {"out": torch.empty(8)}
    out = graph.call_function(operator.getitem, (call, "out"))
    out.meta["val"] = call.meta["val"]["out"]
    graph.output((out,))
    return fx.GraphModule({}, graph), shape_env, fake_mode, call


def tensorify(gm, shape_env, fake_mode):
    """AOTAutograd's tensorify_python_scalars, as AOTAutograd calls it (by its global name)."""
    from inductor_addmm_fix.triton_kernels.float_args import tensorify_caller

    TensorifyState.clear()
    try:
        with fake_mode:
            tensorify_caller().tensorify_python_scalars(gm, shape_env, fake_mode)
    finally:
        TensorifyState.clear()


def test_a_float_kernel_argument_is_read_at_run_time():
    gm, shape_env, fake_mode, call = graph_passing_an_input_float_to_a_kernel()
    tensorify(gm, shape_env, fake_mode)  # stock: TensorifyScalarRestartAnalysis (specialize, trace again)
    read = call.kwargs["kwargs"]["s"]
    assert read.target is aten._local_scalar_dense.default
    assert read.args[0].target is torch.ops.prims.convert_element_type.default  # as Triton: fp32
    assert read.args[0].args == (gm.graph.find_nodes(op="placeholder")[1], torch.float32)
    # Unbacked (no guard on the value), and bound where it is read.
    assert symbol_is_type(read.meta["val"].node.expr, SymT.UNBACKED_FLOAT)
    assert read.meta["unbacked_bindings"]


def test_without_the_feature_a_float_kernel_argument_is_specialized():
    inductor_addmm_fix.install(features="-triton_float_args")
    gm, shape_env, fake_mode, _ = graph_passing_an_input_float_to_a_kernel()
    from torch._dynamo.exc import TensorifyScalarRestartAnalysis

    with pytest.raises(TensorifyScalarRestartAnalysis):
        tensorify(gm, shape_env, fake_mode)
