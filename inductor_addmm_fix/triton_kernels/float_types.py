"""User Triton kernels: a float argument is fp32 in the compiled kernel, as in eager.

Triton's JIT gives a Python float argument the type fp32.  Inductor compiles a user
kernel in a graph with its own signature, and since ``_use_fp64_for_unbacked_floats``
(torch 2.11 on, outside fbcode) types a float literal or an unbacked float (``.item()``,
and the floats ``triton_float_args`` reads at run time) fp64.  Arithmetic with the
argument is then fp64 in the compiled kernel where eager's is fp32: other results, and a
kernel that no longer compiles where a loop-carried value takes the type, as Liger's
KL-div kernel (``x / temperature`` updates ``m = float("-inf")``: "Loop-carried
variable m has initial type fp32 but is re-assigned to fp64 in loop").

We build a user kernel's signature with that option off, as torch 2.15 does
(``signature_of(..., use_fp64_for_python_float=False)`` for user-defined kernels).
Inductor's own kernels keep fp64.

Upstream: fixed in torch 2.15 (user-defined kernels opt out of the fp64 policy; see
pytorch/pytorch#190340 for the change and its discussion).

A float computed from a symbolic size (Liger's KL-div passes ``scale=1 / BT``, which is
``1.0 / sym_float(s0)`` in a graph with a symbolic token count) reaches ``signature_of``
as a sympy expression.  Only a float literal and an unbacked float symbol take the float
branch there: the expression is typed ``i32``/``i64``, and the launch fails with
"'float' object cannot be interpreted as an integer".  We type it as torch types a float
literal (the policy above), every release through 2.15.  Upstream: open
(docs/upstream/inductor-user-kernel-symbolic-float.md).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from ..patching.declare import Decision, needed, not_needed, require
from ..patching.registry import Patch
from ..patching.slots import Attribute, stock_of

NAME = "triton.float_arguments_as_fp32"
SYMBOLIC_NAME = "triton.symbolic_float_arguments_as_floats"
SYMBOLIC_RETIRED_BY = "none yet: signature_of types a float-valued size expression as an integer (torch 2.8-2.15)"
RETIRED_BY = "torch 2.15: signature_of(use_fp64_for_python_float=False) for user-defined Triton kernels"
OWNER = "torch._inductor.codegen.wrapper.PythonWrapperCodegen"
OPTION = "_use_fp64_for_unbacked_floats"


def user_kernels_get_fp64_floats() -> bool:
    """Whether Inductor would type a user kernel's float argument fp64: the fp64 option
    exists and ``signature_of`` has no way for user kernels to opt out of it."""
    from torch._inductor import config
    from torch._inductor.codegen import triton_utils

    if not hasattr(config, OPTION):
        return False
    return "use_fp64_for_python_float" not in inspect.signature(stock_signature_of(triton_utils)).parameters


def stock_signature_of(triton_utils: Any) -> Callable[..., Any]:
    """torch's ``signature_of``, under this package's wrappers of it."""
    return stock_of(triton_utils.signature_of)


def with_fp32_floats(stock: Callable[..., Any]) -> Callable[..., Any]:
    """``define_user_defined_triton_kernel`` run with the fp64 option off."""
    from torch._inductor import config

    def define_user_defined_triton_kernel(*args: Any, **kwargs: Any) -> Any:
        with config.patch({OPTION: False}):
            return stock(*args, **kwargs)

    define_user_defined_triton_kernel.stock = stock  # type: ignore[attr-defined]
    return define_user_defined_triton_kernel


#: torch's sympy functions whose value is a float (torch.utils._sympy.functions)
FLOAT_FUNCTIONS = frozenset({"ToFloat", "FloatTrueDiv", "IntTrueDiv", "FloatPow", "TruncToFloat"})


def is_symbolic_float(expr: Any) -> bool:
    """Whether ``expr`` is a float-valued expression of symbols: a float symbol, or
    arithmetic with a float function or a float literal in it (not a bare literal)."""
    import sympy
    from torch.utils._sympy.symbol import SymT, symbol_is_type

    if not isinstance(expr, sympy.Expr) or isinstance(expr, sympy.Number) or expr.is_integer:
        return False
    if any(symbol_is_type(s, (SymT.FLOAT, SymT.UNBACKED_FLOAT)) for s in expr.free_symbols):
        return True
    functions = {type(f).__name__ for f in expr.atoms(sympy.Function)}
    floaty = FLOAT_FUNCTIONS | {f for f in functions if f.startswith("OpaqueUnaryFn_")}
    return bool(functions & floaty) or bool(expr.atoms(sympy.Float))


def symbolic_floats_as_floats(stock: Callable[..., Any]) -> Callable[..., Any]:
    """``signature_of`` typing a symbolic float as it types a float literal."""

    def signature_of(arg: Any, *args: Any, **kwargs: Any) -> str:
        from torch._inductor.codegen.common import SizeArg

        if isinstance(arg, SizeArg) and is_symbolic_float(arg.expr):
            import sympy

            return stock(SizeArg(arg.name, sympy.Float(0.5)), *args, **kwargs)  # the float branch's policy
        return stock(arg, *args, **kwargs)

    signature_of.stock = stock  # type: ignore[attr-defined]
    return signature_of


def symbolic_float_typed_as_integer() -> bool:
    """Whether stock ``signature_of`` types ``1.0 / sym_float(s0)`` as an integer."""
    import sympy
    from torch._inductor.codegen import triton_utils
    from torch._inductor.codegen.common import SizeArg
    from torch.utils._sympy.functions import FloatTrueDiv, ToFloat

    stock = stock_signature_of(triton_utils)
    scale = FloatTrueDiv(sympy.Float(1.0), ToFloat(sympy.Symbol("s0", integer=True, positive=True)))
    return stock(SizeArg("scale", scale), size_dtype="tl.int32") in ("i32", "i64")


def symbolic_plan() -> Decision:
    from torch._inductor.codegen import triton_utils

    require(callable(vars(triton_utils).get("signature_of")), "torch._inductor.codegen.triton_utils.signature_of")
    probe = symbolic_float_typed_as_integer
    if not probe():
        return not_needed(SYMBOLIC_NAME, "Inductor types a symbolic float argument as a float", probe=probe,
                          obsolete_when=SYMBOLIC_RETIRED_BY)  # fmt: skip
    slot = Attribute(triton_utils, "signature_of", "torch._inductor.codegen.triton_utils")
    reason = (
        "a float computed from a symbolic size (Liger's KL-div scale 1 / BT under dynamic shapes) is typed as an "
        "integer in a user Triton kernel's signature, and its launch fails"
    )
    return needed(SYMBOLIC_NAME, reason, [Patch(SYMBOLIC_NAME, slot, symbolic_floats_as_floats)], probe=probe,
                  obsolete_when=SYMBOLIC_RETIRED_BY)  # fmt: skip


def plan() -> list[Decision]:
    return [fp32_plan(), symbolic_plan()]


def fp32_plan() -> Decision:
    from torch._inductor.codegen import wrapper

    owner = getattr(wrapper, "PythonWrapperCodegen", None)
    require(owner is not None, OWNER)
    require(callable(vars(owner).get("define_user_defined_triton_kernel")), f"{OWNER}.define_user_defined_triton_kernel")
    probe = user_kernels_get_fp64_floats
    if not probe():
        return not_needed(NAME, "Inductor types a user kernel's float arguments as Triton does (fp32)", probe=probe,
                          obsolete_when=RETIRED_BY)  # fmt: skip
    slot = Attribute(owner, "define_user_defined_triton_kernel", OWNER)
    reason = (
        "a float argument of a user Triton kernel is fp64 in the compiled kernel and fp32 in eager: other "
        "results, and Liger's KL-div kernel fails to compile (a loop-carried value changes type)"
    )
    return needed(NAME, reason, [Patch(NAME, slot, with_fp32_floats)], probe=probe, obsolete_when=RETIRED_BY)
