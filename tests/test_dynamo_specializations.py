"""What Dynamo specializes stays where it belongs: a float specialized while compiling
one frame is not specialized in the next frames, and the strides of a static-shaped
tensor are answered as ints."""

import torch
import torch._inductor.compile_fx  # noqa: F401  (the features here apply once Inductor is imported)
from torch._dynamo.utils import counters

import inductor_addmm_fix
from inductor_addmm_fix.dynamo import static_strides


def clamped(x, f):
    return x.clamp(min=f)  # clamp(min=SymFloat) cannot be tensorified: f is specialized


def scaled(x, f):
    return x * f  # tensorified: f stays dynamic


def graphs_of_scaled_for_four_values() -> int:
    """Compile ``clamped`` at two values (it specializes its float ``f``), then count the
    graphs ``scaled``, whose float is also named ``f``, needs for four values."""
    x = torch.randn(4)
    first = torch.compile(clamped, backend="aot_eager")
    first(x, 0.5)
    first(x, 1.5)
    second = torch.compile(scaled, backend="aot_eager")
    before = counters["stats"]["unique_graphs"]
    for i in range(4):
        second(x, 1.5 + i)
    return counters["stats"]["unique_graphs"] - before


def test_a_float_specialized_in_one_frame_stays_dynamic_in_the_next():
    assert graphs_of_scaled_for_four_values() == 2  # the first value, then a dynamic float


def test_without_the_feature_the_specialization_leaks_into_the_next_frame():
    inductor_addmm_fix.install(features="-float_specializations")
    assert graphs_of_scaled_for_four_values() == 4  # one graph per value


def test_strides_specialized_after_the_tensor_was_made_are_ints():
    from torch._dynamo.variables.tensor import TensorVariable

    assert not static_strides.specialized_strides_stay_symbolic(TensorVariable.specialize)


def test_without_the_feature_such_strides_are_symints():
    from torch._dynamo.variables.tensor import TensorVariable

    inductor_addmm_fix.install(features="-static_strides")
    assert static_strides.specialized_strides_stay_symbolic(TensorVariable.specialize)
