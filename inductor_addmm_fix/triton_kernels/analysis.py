"""User Triton kernels: the analysis of what a kernel writes compiles its scalar arguments
as arguments, not as constants.

AOTAutograd and Inductor find the tensors a user Triton kernel writes by compiling the
kernel to Triton IR (``generate_ttir``) and following its stores back to its arguments
(``identify_mutated_tensors``).  torch 2.10 and 2.11 hand Triton every argument that is
not a tensor (ints, floats, and the symbolic values they stand in for with ``2``) in
``ASTSource``'s constants, and Triton 3.6 compiles each entry of those constants as a
``tl.constexpr``: in the kernel's body the argument is a Python int or float.  A kernel
that treats it as the run-time scalar it is cannot be compiled that way: Liger's
cross-entropy kernel calls ``softcap.to(tl.float32)`` (Gemma's softcap) and
``sum_non_ignore_weight.to(tl.float32)`` (class weights), and the analysis fails with
``AttributeError: 'float' object has no attribute 'to'``.  torch then logs the
traceback as a warning at every such kernel call it traces ("Encountered an exception in
identify_mutated_tensors, assuming every input is mutated") and takes every tensor the
kernel gets as written: AOTAutograd copies each of them before the kernel.

During the analysis only, Triton's ``ASTSource`` is given as constants only the
arguments that are ``tl.constexpr`` or None (as torch 2.12 gives them); the other
scalars become arguments of the IR function.  The list of names the analysis maps the
function's arguments to gets them too, in the kernel's order, and scalars are taken
out of what it reports written (a store to ``ptr + i * stride`` reaches ``stride``).

Upstream: pytorch/pytorch#169782 (torch 2.12): only constexpr and None arguments are
constants; the probe then finds nothing to do.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
from typing import Any, Callable, Iterator

import torch

from ..patching.counters import count
from ..patching.declare import Decision, PlanError, Unavailable, needed, not_needed, require
from ..patching.probes import global_names
from ..patching.registry import Patch
from ..patching.slots import Attribute, innermost
from .probe_kernel import analysis_target, no_warnings_as_errors, probe_arguments, probe_kernel, triton_available

RETIRED_BY = "pytorch/pytorch#169782 (torch 2.12): only tl.constexpr and None arguments are Triton constants"
NAME = "triton.analysis_scalars_as_arguments"
PREFIX = "triton_analysis"  # counted as "triton_analysis:<event>" in counters["inductor_addmm_fix"]
MODULE = "torch._higher_order_ops.triton_kernel_wrap"


# ---------------------------------------------------------------- the analysis's constants
def _is_constant(fn: Any, key: Any, value: Any) -> bool:
    """Whether the constants entry ``key`` (a name, or a path whose first index is the
    parameter's) of kernel ``fn`` is a ``tl.constexpr`` parameter or None."""
    if value is None:
        return True
    index = fn.arg_names.index(key) if isinstance(key, str) else key[0]
    return bool(fn.params[index].is_constexpr)


@functools.lru_cache(maxsize=None)
def _constexpr_only(stock: type) -> type:
    """A subclass of Triton's ``ASTSource`` that keeps only constexpr and None entries
    of the constants it is given."""

    class ASTSource(stock):  # type: ignore[misc, valid-type]
        inductor_addmm_fix = True

        def __init__(self, fn, signature, constants=None, *args, **kwargs):
            if constants:
                constants = {k: v for k, v in constants.items() if _is_constant(fn, k, v)}
            super().__init__(fn, signature, constants, *args, **kwargs)

    return ASTSource


@contextlib.contextmanager
def constants_are_constexprs_only() -> Iterator[None]:
    """While inside, ``triton.compiler.compiler.ASTSource`` (which ``generate_ttir``
    imports at each call) keeps only constexpr and None constants."""
    import triton.compiler.compiler as compiler

    stock = compiler.ASTSource
    if getattr(stock, "inductor_addmm_fix", False):  # already inside
        yield
        return
    compiler.ASTSource = _constexpr_only(stock)
    try:
        yield
    finally:
        compiler.ASTSource = stock


def _jit_and_arguments(kernel: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The JITFunction ``generate_ttir`` compiles and the arguments it compiles it with
    (an autotuned kernel's first config added, as ``generate_ttir`` adds it)."""
    from triton.runtime.autotuner import Autotuner

    if isinstance(kernel, Autotuner):
        if kernel.configs:
            kwargs = {**kwargs, **kernel.configs[0].kwargs}
        kernel = kernel.fn
    return kernel, kwargs


def argument_names(fn: Any, arguments: dict[str, Any], tensor_names: list[str]) -> list[str]:
    """The names of the IR function's arguments: ``tensor_names`` (what ``generate_ttir``
    lists: the tensors, a TMA descriptor followed by the placeholders of its strides and
    sizes) with the kernel's other arguments that are neither constexpr nor None in
    their places.  A list that already names them comes back as it was."""
    groups: dict[str, list[str]] = {}
    current: list[str] | None = None
    for name in tensor_names:
        if name in arguments:
            current = groups.setdefault(name, [])
        if current is None:
            raise ValueError(f"{name!r} follows no argument of the kernel")
        current.append(name)
    names: list[str] = []
    for name, param in zip(fn.arg_names, fn.params):
        if param.is_constexpr or arguments.get(name) is None:
            continue
        names += groups.pop(name, [name])
    if groups:
        raise ValueError(f"arguments the kernel does not take as arguments: {sorted(groups)}")
    return names


def generate_ttir_with_scalar_arguments(stock: Callable[..., Any]) -> Callable[..., Any]:
    """``generate_ttir`` compiling scalar arguments as arguments, and naming them."""

    def generate_ttir(kernel, kwargs, tma_descriptor_metadata, *args: Any, **kw: Any):
        with constants_are_constexprs_only():
            module, tensor_names = generate_ttir.stock(kernel, kwargs, tma_descriptor_metadata, *args, **kw)
        fn, arguments = _jit_and_arguments(kernel, kwargs)
        names = argument_names(fn, arguments, list(tensor_names))
        if len(names) > len(tensor_names):
            count(PREFIX, "scalar_arguments", len(names) - len(tensor_names))
        return module, names

    generate_ttir.stock = stock  # type: ignore[attr-defined]
    generate_ttir.splices = True  # type: ignore[attr-defined]  (calls through .stock: see slots.wrapper_over)
    return generate_ttir


def is_scalar(value: Any) -> bool:
    import sympy

    return isinstance(value, (numbers.Number, torch.SymInt, torch.SymFloat, torch.SymBool, sympy.Basic))


def written_tensors_only(stock: Callable[..., Any]) -> Callable[..., Any]:
    """``identify_mutated_tensors`` without the scalar arguments a store's address reaches."""

    def identify_mutated_tensors(kernel, kwargs, tma_descriptor_metadata, *args: Any, **kw: Any):
        mutated = identify_mutated_tensors.stock(kernel, kwargs, tma_descriptor_metadata, *args, **kw)
        return [name for name in mutated if not is_scalar(kwargs.get(name))]

    identify_mutated_tensors.stock = stock  # type: ignore[attr-defined]
    identify_mutated_tensors.splices = True  # type: ignore[attr-defined]
    return identify_mutated_tensors


def _stock(fn: Any) -> Any:
    return getattr(fn, "stock", fn)


def analysis_compiles_scalars_as_constants() -> bool:
    """Whether stock torch's ``generate_ttir`` fails on the probe kernel (its float
    argument compiled as a constant) where it compiles with constexpr-only constants."""
    from torch._higher_order_ops import triton_kernel_wrap as tkw

    stock = _stock(tkw.generate_ttir)
    with analysis_target(), no_warnings_as_errors():
        try:
            stock(probe_kernel(), probe_arguments(), {})
        except Exception:
            pass
        else:
            return False
        try:
            with constants_are_constexprs_only():
                stock(probe_kernel(), probe_arguments(), {})
        except Exception as error:
            raise PlanError(f"Triton cannot compile the probe kernel to Triton IR ({type(error).__name__}: {error})") from error
    return True


def self_test() -> None:
    """After patching, the analysis of the probe kernel finds that it writes ``out_ptr`` alone."""
    from torch._higher_order_ops import triton_kernel_wrap as tkw

    if not hasattr(tkw.generate_ttir, "stock"):  # not needed on this torch: nothing patched
        return
    with analysis_target(), no_warnings_as_errors():
        written = tkw.identify_mutated_tensors(probe_kernel(), probe_arguments(), {})
    if written != ["out_ptr"]:
        raise PlanError(f"self-test failed after patching: the probe kernel writes {written}, not ['out_ptr']")


def plan() -> list[Decision]:
    from torch._higher_order_ops import triton_kernel_wrap as tkw

    if not triton_available():
        raise Unavailable("Triton is not installed: no user Triton kernel to analyse")
    require(callable(getattr(tkw, "generate_ttir", None)), f"{MODULE}.generate_ttir")
    probe = analysis_compiles_scalars_as_constants
    if not probe():
        return [not_needed(NAME, "the analysis compiles scalar arguments as arguments", probe=probe, obsolete_when=RETIRED_BY)]
    identify = getattr(tkw, "identify_mutated_tensors", None)
    require(callable(identify), f"{MODULE}.identify_mutated_tensors")
    require("generate_ttir" in global_names(innermost(identify)), "generate_ttir called by name from identify_mutated_tensors")
    reason = (
        "the analysis of what a user Triton kernel writes compiles its scalar arguments as constants: "
        "a kernel calling .to() on one (Liger's cross entropy with class weights or softcap) fails it, "
        "a traceback is logged at each call and every tensor the kernel gets is copied as if written"
    )
    patches = [
        Patch(NAME, Attribute(tkw, "generate_ttir", MODULE), generate_ttir_with_scalar_arguments),
        Patch(NAME, Attribute(tkw, "identify_mutated_tensors", MODULE), written_tensors_only),
    ]
    return [needed(NAME, reason, patches, probe=probe, obsolete_when=RETIRED_BY)]
