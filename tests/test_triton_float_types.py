"""A user Triton kernel's float argument is fp32 in the kernel Inductor compiles, as
Triton's JIT makes it in eager; Inductor's own kernels keep fp64 (torch 2.11-2.14)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import sympy
import torch
import torch._inductor.compile_fx  # noqa: F401  (the feature applies once Inductor is imported)
from torch._inductor.codegen.triton_utils import signature_of
from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.virtualized import V

from inductor_addmm_fix.triton_kernels import float_types

pytestmark = pytest.mark.skipif(
    not float_types.user_kernels_get_fp64_floats(), reason="this torch types a user kernel's floats as Triton does"
)


def float_argument_type() -> str:
    """The signature type Inductor gives a float literal argument, on a CUDA graph."""
    from torch._inductor.codegen.common import SizeArg

    with V.set_graph_handler(SimpleNamespace(current_device=torch.device("cuda"))):
        return signature_of(SizeArg("temperature", sympy.Float(2.0)), size_dtype=None)


def test_inductor_s_own_kernels_type_a_float_argument_fp64():
    assert float_argument_type() == "fp64"


def test_a_user_kernel_s_float_argument_is_fp32_while_inductor_defines_it():
    assert float_types.with_fp32_floats(lambda: float_argument_type())() == "fp32"
    assert float_argument_type() == "fp64"  # and fp64 again after


def test_the_feature_wraps_where_inductor_defines_user_kernels():
    defined = vars(PythonWrapperCodegen)["define_user_defined_triton_kernel"]
    assert defined.__module__ == float_types.__name__
    assert defined.stock.__module__ == PythonWrapperCodegen.__module__


@pytest.mark.features("-triton_float_types")
def test_without_the_feature_inductor_defines_user_kernels_as_it_did():
    defined = vars(PythonWrapperCodegen)["define_user_defined_triton_kernel"]
    assert defined.__module__ == PythonWrapperCodegen.__module__
