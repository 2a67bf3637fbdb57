"""User Triton kernels: what a kernel reads and writes is worked out once per kernel and
signature, not again at every call of it.

torch finds the tensors a user Triton kernel reads and writes by compiling the kernel to
Triton IR and following its loads and stores back to its arguments
(``identify_mutated_tensors``, torch 2.8-2.11; ``identify_accessed_tensors``, 2.12+):
tens of milliseconds a time (Liger's cross-entropy kernel: ~55 ms on one CPU core).
Each call of a kernel in a graph is analysed again by each stage that needs the answer:
AOTAutograd's functionalization, Inductor's graph lowering, its ``UserDefinedTritonKernel``
node.  A chunked loop calls the same kernel once per chunk, and Dynamo unrolls the loop:
Liger's FusedLinearCrossEntropy runs 128 chunks at 1024 tokens on a model with H 1024 and
V 151936, so one compile analyses the same kernel with the same signature hundreds of
times, again at every recompile.

The answer depends only on what ``generate_ttir`` hands Triton: the kernel (its source and
the functions it calls, ``JITFunction.cache_key``; an autotuned kernel's first config),
the target, and per argument: a symbolic value (replaced by 2), the dtype of a fake
tensor or ``TensorBox`` (replaced by an empty tensor of that dtype), the value of a
constant.  The names it reports are the kernel's own parameter names, the same at every
call site.  So the analysis keeps the answers it gave, keyed on exactly that; a call
with an argument of any other kind (a real tensor, whose alignment Triton specializes
on; a TMA descriptor; a tuple) is analysed as before and not kept.  Each caller gets
its own copy of the answer.  A kernel whose analysis fails still gets torch's answer
(every tensor written), and torch's warning, once per signature instead of per call.

Upstream: pytorch/pytorch#193227 (open) works the answer out once where the graph node
is made, with a cache keyed like this one; the probe then finds that a second analysis
of the same kernel and arguments no longer compiles it again.
"""

from __future__ import annotations

import collections
import copy
import threading
from typing import Any, Callable

import torch

from ..patching.counters import count
from ..patching.declare import Decision, Unavailable, needed, not_needed, require
from ..patching.probes import global_names
from ..patching.registry import Patch
from ..patching.slots import Attribute, innermost
from .probe_kernel import analysis_target, no_warnings_as_errors, probe_arguments, probe_kernel, triton_available

RETIRED_BY = "pytorch/pytorch#193227 (open): a user Triton kernel's accesses worked out once per signature"
NAME = "triton.analysis_once_per_signature"
PREFIX = "triton_analysis_cache"  # counted as "triton_analysis_cache:<hit|miss|uncached>"
MODULE = "torch._higher_order_ops.triton_kernel_wrap"
ANALYSES = ("identify_accessed_tensors", "identify_mutated_tensors")  # torch 2.12+, torch 2.8-2.11
KEPT = 512  # answers kept (least recently used dropped first)


def analysis_name(tkw: Any) -> str:
    """The name of the installed torch's analysis function."""
    for name in ANALYSES:
        if callable(getattr(tkw, name, None)):
            return name
    require(False, f"{MODULE}.identify_accessed_tensors (or identify_mutated_tensors)")
    raise AssertionError  # unreachable: require raised


# ---------------------------------------------------------------- the key
_SCALARS = (bool, int, str, torch.dtype, type(None))


def argument_kind(value: Any) -> Any:
    """What ``generate_ttir`` hands Triton for one argument, as a hashable key, or None
    where the answer could depend on more than the key would say."""
    import sympy

    from torch._inductor.ir import TensorBox
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool, sympy.Expr)):
        return ("symbolic",)
    if isinstance(value, (FakeTensor, TensorBox)):
        return ("tensor", value.dtype)
    if isinstance(value, float):
        return ("float", repr(value))  # repr: -0.0 is not 0.0, nan is itself
    if isinstance(value, _SCALARS):
        return (type(value).__name__, value)
    return None


def signature_key(kernel: Any, kwargs: dict[str, Any], tma_descriptor_metadata: Any) -> Any:
    """The key of one analysis, or None if it is not to be kept."""
    import triton
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    if tma_descriptor_metadata:
        return None
    config: tuple = ()
    fn = kernel
    if isinstance(kernel, Autotuner):
        if kernel.configs:
            config = tuple((name, argument_kind(v)) for name, v in sorted(kernel.configs[0].kwargs.items()))
            if any(kind is None for _, kind in config):
                return None
        fn = kernel.fn
    if not isinstance(fn, JITFunction):
        return None
    arguments = []
    for name, value in kwargs.items():
        kind = argument_kind(value)
        if kind is None:
            return None
        arguments.append((name, kind))
    try:
        source = fn.cache_key  # the kernel's source and the functions it calls
        target = repr(triton.runtime.driver.active.get_current_target())
    except Exception:  # a kernel or driver Triton cannot key: analysed as before
        return None
    return (source, config, tuple(arguments), target)


# ---------------------------------------------------------------- the cache
def kept_answers(stock: Callable[..., Any]) -> Callable[..., Any]:
    """The analysis ``stock``, answering a signature it has answered from what it kept."""
    answers: collections.OrderedDict[Any, Any] = collections.OrderedDict()
    answered_by = [stock]  # the analysis the answers kept came from
    lock = threading.Lock()

    def analyse(kernel, kwargs, tma_descriptor_metadata, *args: Any, **kw: Any):
        try:
            key = None if (args or kw) else signature_key(kernel, kwargs, tma_descriptor_metadata)
        except Exception:
            key = None
        inner = analyse.stock  # what it wraps now (another feature's wrapper may come and go under it)
        if key is None:
            count(PREFIX, "uncached")
            return inner(kernel, kwargs, tma_descriptor_metadata, *args, **kw)
        with lock:
            if answered_by[0] is not inner:  # answers of another analysis: forget them
                answers.clear()
                answered_by[0] = inner
            answer = answers.get(key)
            if answer is not None:
                answers.move_to_end(key)
        if answer is not None:
            count(PREFIX, "hit")
            return copy.deepcopy(answer)
        answer = inner(kernel, kwargs, tma_descriptor_metadata)
        count(PREFIX, "miss")
        with lock:
            if answered_by[0] is inner:
                answers[key] = copy.deepcopy(answer)
            while len(answers) > KEPT:
                answers.popitem(last=False)
        return answer

    analyse.stock = stock  # type: ignore[attr-defined]
    analyse.splices = True  # type: ignore[attr-defined]  (calls through .stock: see slots.wrapper_over)
    analyse.answers = answers  # type: ignore[attr-defined]
    return analyse


# ---------------------------------------------------------------- probe
def analysis_repeats() -> bool:
    """Whether a second analysis of the probe kernel with the same arguments compiles it
    to Triton IR again."""
    from torch._higher_order_ops import triton_kernel_wrap as tkw

    analyse = getattr(tkw, analysis_name(tkw))
    require("generate_ttir" in global_names(innermost(analyse)), "generate_ttir called by name from the analysis")
    compiled = 0
    generate = tkw.generate_ttir

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal compiled
        compiled += 1
        return generate(*args, **kwargs)

    tkw.generate_ttir = counting
    try:
        with analysis_target(), no_warnings_as_errors():
            for _ in range(2):
                analyse(probe_kernel(), probe_arguments(), {})
    finally:
        tkw.generate_ttir = generate
    return compiled >= 2


def plan() -> list[Decision]:
    from torch._higher_order_ops import triton_kernel_wrap as tkw

    if not triton_available():
        raise Unavailable("Triton is not installed: no user Triton kernel to analyse")
    require(callable(getattr(tkw, "generate_ttir", None)), f"{MODULE}.generate_ttir")
    name = analysis_name(tkw)
    probe = analysis_repeats
    if not probe():
        return [not_needed(NAME, "the analysis of a kernel is not repeated for the same signature", probe=probe,
                           obsolete_when=RETIRED_BY)]
    reason = (
        "each call of a user Triton kernel in a graph is compiled to Triton IR again by every stage that asks "
        "what it writes (tens of ms each): a chunked loop that Dynamo unrolls (Liger's FLCE) repeats it hundreds "
        "of times per compile"
    )
    return [needed(NAME, reason, [Patch(NAME, Attribute(tkw, name, MODULE), kept_answers)], probe=probe,
                   obsolete_when=RETIRED_BY)]
