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
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from ..patching.declare import Decision, needed, not_needed, require
from ..patching.registry import Patch
from ..patching.slots import Attribute

NAME = "triton.float_arguments_as_fp32"
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
    return "use_fp64_for_python_float" not in inspect.signature(triton_utils.signature_of).parameters


def with_fp32_floats(stock: Callable[..., Any]) -> Callable[..., Any]:
    """``define_user_defined_triton_kernel`` run with the fp64 option off."""
    from torch._inductor import config

    def define_user_defined_triton_kernel(*args: Any, **kwargs: Any) -> Any:
        with config.patch({OPTION: False}):
            return stock(*args, **kwargs)

    define_user_defined_triton_kernel.stock = stock  # type: ignore[attr-defined]
    return define_user_defined_triton_kernel


def plan() -> list[Decision]:
    from torch._inductor.codegen import wrapper

    owner = getattr(wrapper, "PythonWrapperCodegen", None)
    require(owner is not None, OWNER)
    require(callable(vars(owner).get("define_user_defined_triton_kernel")), f"{OWNER}.define_user_defined_triton_kernel")
    probe = user_kernels_get_fp64_floats
    if not probe():
        return [not_needed(NAME, "Inductor types a user kernel's float arguments as Triton does (fp32)", probe=probe,
                           obsolete_when=RETIRED_BY)]  # fmt: skip
    slot = Attribute(owner, "define_user_defined_triton_kernel", OWNER)
    reason = (
        "a float argument of a user Triton kernel is fp64 in the compiled kernel and fp32 in eager: other "
        "results, and Liger's KL-div kernel fails to compile (a loop-carried value changes type)"
    )
    return [needed(NAME, reason, [Patch(NAME, slot, with_fp32_floats)], probe=probe, obsolete_when=RETIRED_BY)]
