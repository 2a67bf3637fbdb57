"""A user Triton kernel's float argument is fp32 in the kernel Inductor compiles, as
Triton's JIT makes it in eager; Inductor's own kernels keep fp64 (torch 2.11-2.14).  A
float computed from a symbolic size is typed as a float, not as an integer (every torch)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import sympy
import torch
import torch._inductor.compile_fx  # noqa: F401  (the feature applies once Inductor is imported)
from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.virtualized import V
from torch.utils._sympy.functions import FloatTrueDiv, FloorDiv, ToFloat

from inductor_addmm_fix.triton_kernels import float_types

fp64_policy = pytest.mark.skipif(
    not float_types.user_kernels_get_fp64_floats(), reason="this torch types a user kernel's floats as Triton does"
)
S0 = sympy.Symbol("s0", integer=True, positive=True)


def float_argument_type(expr=sympy.Float(2.0), size_dtype=None) -> str:
    """The signature type Inductor gives an argument of value ``expr``, on a CUDA graph."""
    from torch._inductor.codegen import triton_utils
    from torch._inductor.codegen.common import SizeArg

    with V.set_graph_handler(SimpleNamespace(current_device=torch.device("cuda"))):
        return triton_utils.signature_of(SizeArg("scale", expr), size_dtype=size_dtype)


def one_over(size):
    return FloatTrueDiv(sympy.Float(1.0), ToFloat(size))


@fp64_policy
def test_inductor_s_own_kernels_type_a_float_argument_fp64():
    assert float_argument_type() == "fp64"


@fp64_policy
def test_a_user_kernel_s_float_argument_is_fp32_while_inductor_defines_it():
    assert float_types.with_fp32_floats(lambda: float_argument_type())() == "fp32"
    assert float_argument_type() == "fp64"  # and fp64 again after


@fp64_policy
def test_the_feature_wraps_where_inductor_defines_user_kernels():
    defined = vars(PythonWrapperCodegen)["define_user_defined_triton_kernel"]
    assert defined.__module__ == float_types.__name__
    assert defined.stock.__module__ == PythonWrapperCodegen.__module__


@fp64_policy
@pytest.mark.features("-triton_float_types")
def test_without_the_feature_inductor_defines_user_kernels_as_it_did():
    defined = vars(PythonWrapperCodegen)["define_user_defined_triton_kernel"]
    assert defined.__module__ == PythonWrapperCodegen.__module__


@pytest.mark.parametrize(
    "expr",
    [one_over(S0), ToFloat(S0), 2.5 * ToFloat(S0), sympy.Symbol("zf0", real=True), sympy.Symbol("zuf0", real=True)],
    ids=["one-over-size", "size-as-float", "float-times-size", "float-symbol", "unbacked-float"],
)
def test_a_float_valued_size_expression_is_a_symbolic_float(expr):
    assert float_types.is_symbolic_float(expr)


@pytest.mark.parametrize(
    "expr",
    [S0, 2 * S0 + 1, FloorDiv(S0, 2), sympy.Min(S0, 2048), sympy.Integer(3), sympy.Float(2.0)],
    ids=["size", "size-arithmetic", "floor-division", "min", "integer-literal", "float-literal"],
)
def test_an_integer_expression_or_a_literal_is_not_a_symbolic_float(expr):
    assert not float_types.is_symbolic_float(expr)


def test_stock_inductor_types_a_float_of_a_symbolic_size_as_an_integer():
    assert float_types.symbolic_float_typed_as_integer()  # the reason the patch is needed, on every torch here


def test_a_float_of_a_symbolic_size_is_typed_as_a_float_literal_is():
    assert float_argument_type(one_over(S0)) == float_argument_type(sympy.Float(2.0))
    assert float_argument_type(one_over(S0), size_dtype="tl.int64") == float_argument_type(sympy.Float(2.0))


@fp64_policy
def test_a_user_kernel_s_float_of_a_symbolic_size_is_fp32():
    assert float_types.with_fp32_floats(lambda: float_argument_type(one_over(S0)))() == "fp32"


def test_an_integer_size_expression_keeps_its_integer_type():
    assert float_argument_type(2 * S0, size_dtype="tl.int32") == "i32"
    assert float_argument_type(2 * S0, size_dtype="tl.int64") == "i64"


@pytest.mark.features("-triton_float_types")
def test_without_the_feature_a_float_of_a_symbolic_size_stays_an_integer():
    assert float_argument_type(one_over(S0), size_dtype="tl.int32") == "i32"
