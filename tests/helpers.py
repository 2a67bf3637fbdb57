"""Shared by the tests (not a test file): compile a function with Inductor and return
its result, the generated code and what the package counted; a snapshot of every
slot of torch that the package may touch; a fresh interpreter of this Python."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import torch
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

from inductor_addmm_fix.patching.counters import COUNTER

FAMILY = ("mm", "bmm", "addmm", "baddbmm")
ROOT = Path(__file__).resolve().parents[1]


def fresh(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """``python <args>`` in a fresh interpreter of this Python, from the checkout, with
    ``env`` set (and no INDUCTOR_ADDMM_FIX* or PYTHONWARNINGS from this process)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_ADDMM_FIX") and k != "PYTHONWARNINGS"}
    environ.update(env)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- compile and count
@dataclasses.dataclass
class Compiled:
    result: object
    codes: list  # the generated code of each graph, in order
    counts: dict  # counters["inductor_addmm_fix"]: "<what>:<event>" -> n
    fn: object = None  # the compiled function, to call again

    @property
    def code(self) -> str:
        return "\n".join(self.codes)

    def lowered(self, op: str) -> int:
        """How many times the package lowered ``<op>.dtype`` (any choice)."""
        return sum(n for key, n in self.counts.items() if key.startswith(f"{op}.dtype:"))

    def events(self, what: str) -> dict:
        """``{event: n}`` of one pass or lowering, e.g. ``events("slice_writes")``."""
        return {key.split(":", 1)[1]: n for key, n in self.counts.items() if key.startswith(f"{what}:")}


def without_graph_caches():
    """Lower every graph (a graph served from the FX graph or AOTAutograd cache skips
    lowering, so nothing would be counted); compiled kernels are still reused."""
    stack = contextlib.ExitStack()
    stack.enter_context(torch._inductor.config.patch(fx_graph_cache=False))
    stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
    return stack


def compile_and_run(fn, *args, fullgraph=True, dynamic=False, post_grad_passes=True, no_grad=False, **options) -> Compiled:
    """``torch.compile(fn, backend="inductor")(*args)`` from a fresh Dynamo, with the
    package's counters cleared first.  ``post_grad_passes=False``: the post-grad slot
    empty (stock Inductor's passes only), as a control."""
    torch._dynamo.reset()
    counters[COUNTER].clear()
    compiled = torch.compile(fn, backend="inductor", fullgraph=fullgraph, dynamic=dynamic, **options)
    with contextlib.ExitStack() as stack:
        stack.enter_context(without_graph_caches())
        if not post_grad_passes:
            stack.enter_context(torch._inductor.config.patch(post_grad_custom_post_pass=None))
        if no_grad:
            stack.enter_context(torch.no_grad())
        result, codes = run_and_get_code(compiled, *args)
    return Compiled(result, codes, dict(counters[COUNTER]), compiled)


def call_again(compiled: Compiled, *args) -> Compiled:
    """Call ``compiled.fn`` again, keeping what Dynamo compiled before (a new shape
    recompiles it with symbolic sizes: automatic dynamic shapes), counters cleared
    first; ``codes``: the graphs this call compiled."""
    from unittest import mock

    from torch._inductor.graph import GraphLowering

    counters[COUNTER].clear()
    codes: list = []
    with without_graph_caches(), mock.patch.object(GraphLowering, "save_output_code", codes.append):
        result = compiled.fn(*args)
    return Compiled(result, codes, dict(counters[COUNTER]), compiled.fn)


# ---------------------------------------------------------------- compile limits
def many_recompiles():
    """Dynamo's recompile limits raised to 1000: a compiled function kept across many
    calls recompiles its frame for every new specialization."""
    limits = {
        name: 1000
        for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit")
        if hasattr(torch._dynamo.config, name)
    }
    return torch._dynamo.config.patch(**limits)


_ALLOC = re.compile(r"^\s*(buf\d+) = empty_strided_cpu\(\(([^)]*)\), \([^)]*\), (torch\.\w+)\)")


def most_alive(code: str, shape: tuple) -> int:
    """The largest number of ``shape`` buffers allocated at once, replaying the
    wrapper's ``call()``: allocations, ``del bufN`` and ``bufA = bufB; del bufB  # reuse``."""
    alive: dict[str, tuple] = {}
    best = 0
    for line in code.split("def call(", 1)[1].splitlines():
        m = _ALLOC.match(line)
        if m:
            alive[m.group(1)] = tuple(int(s) for s in m.group(2).split(",") if s.strip())
        for name in re.findall(r"\bdel (buf\d+)", line):
            alive.pop(name, None)
        reuse = re.match(r"^\s*(buf\d+) = (buf\d+); del \2\s*# reuse", line)
        if reuse and reuse.group(2) in alive:
            alive[reuse.group(1)] = alive.pop(reuse.group(2))
        best = max(best, sum(1 for s in alive.values() if s == shape))
    return best


def allocations(code: str, shape: tuple) -> int:
    """How many buffers of ``shape`` the generated code allocates (any device)."""
    return len(re.findall(rf"empty_strided_\w+\({re.escape(str(tuple(shape)))}", code))


# ---------------------------------------------------------------- features
def unavailable_features() -> set:
    """The features this environment lacks what they need for: ``chunk_order`` before
    torch 2.10, ``power_of_2_sizes``, ``triton_analysis`` and ``triton_analysis_cache``
    without Triton, ``accumulate_kernel`` without a Triton that has tensor descriptors.
    Every other feature applies."""
    from inductor_addmm_fix.dynamo import power_of_2_sizes
    from inductor_addmm_fix.inductor import hopper_accumulate
    from inductor_addmm_fix.inductor.passes import chunk_order
    from inductor_addmm_fix.triton_kernels import analysis

    lacking = set()
    if hopper_accumulate.triton_supported() is not None:
        lacking.add("accumulate_kernel")
    if not chunk_order.supported():
        lacking.add("chunk_order")
    if power_of_2_sizes.triton_next_power_of_2() is None:
        lacking.add("power_of_2_sizes")
    if not analysis.triton_available():
        lacking |= {"triton_analysis", "triton_analysis_cache"}
    return lacking


def settled_states() -> dict:
    """feature -> what a working install reports for it here: ``applied``; ``not needed
    on this torch`` where its probe finds stock torch right (``triton_clones`` on 2.15,
    ``triton_analysis`` on 2.12) or nothing for it to act on (``memory_estimate`` before
    2.11);
    ``unavailable on this torch`` (the start of the state) where the environment lacks
    what it needs (:func:`unavailable_features`)."""
    from inductor_addmm_fix.features import NAMES
    from inductor_addmm_fix.inductor import reinplace
    from inductor_addmm_fix.triton_kernels import analysis, clones, float_types

    states = {name: "applied" for name in NAMES}
    if not float_types.user_kernels_get_fp64_floats() and not float_types.symbolic_float_typed_as_integer():
        states["triton_float_types"] = "not needed on this torch"
    if not clones.stock_copy_reads_storage_before_the_view():
        states["triton_clones"] = "not needed on this torch"
    if analysis.triton_available() and not analysis.analysis_compiles_scalars_as_constants():
        states["triton_analysis"] = "not needed on this torch"
    if reinplace.fallback_kernel_runs_out_variants() is False:
        states["memory_estimate"] = "not needed on this torch"
    for name in unavailable_features():
        states[name] = "unavailable on this torch"
    return states


def settled(status, names=None) -> bool:
    """Every named feature (default: all) in the state a working install gives it here,
    or, where a feature it needs (``Feature.needs``) is not applied in ``status``, off
    naming that one; ``status`` a :class:`Status` or its ``features`` mapping (as
    ``--json`` gives it)."""
    from inductor_addmm_fix.features import BY_NAME

    features, want = getattr(status, "features", status), settled_states()
    for name in want:
        off = [n for n in BY_NAME[name].needs if features[n] not in ("applied", "not needed on this torch")]
        if off:
            want[name] = f"off (needs the {off[0]} feature, which is not applied)"
    return all(features[n].startswith(want[n]) for n in (want if names is None else names))


# ---------------------------------------------------------------- torch's slots
def family_ops():
    """The eight OpOverloads of the out_dtype feature."""
    return [getattr(getattr(torch.ops.aten, name), which) for name in FAMILY for which in ("dtype", "dtype_out")]


@contextlib.contextmanager
def liger_distill_mimic():
    """``tests/liger_distill_mimic.py`` imported as Liger's fused linear JSD and KL-div
    modules, with ``tests/liger_dispatch_mimic.py`` as Liger's dispatch module, for the
    duration: yields (the JSD module, the KL-div module)."""
    from inductor_addmm_fix.dynamo.liger_distill_head import FORWARDS

    path = os.path.join(os.path.dirname(__file__), "liger_distill_mimic.py")
    jsd, kl_div = (FORWARDS[f].module for f in ("fused_linear_jsd_forward", "fused_linear_kl_div_forward"))
    with liger_dispatch_mimic():
        with liger_mimic(path, jsd) as jsd_module, liger_mimic(path, kl_div) as kl_div_module:
            yield jsd_module, kl_div_module


@contextlib.contextmanager
def liger_dispatch_mimic():
    """``tests/liger_dispatch_mimic.py`` imported as Liger's dispatch module
    (``liger_kernel.backends.dispatch``), a fresh copy for the duration; yields it."""
    from inductor_addmm_fix.dynamo import liger_dispatch

    with liger_mimic(os.path.join(os.path.dirname(__file__), "liger_dispatch_mimic.py"), liger_dispatch.MODULE) as module:
        yield module


def graph_breaks() -> int:
    """The graph breaks Dynamo counted (``counters["graph_break"]``) since they were cleared."""
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


def live_tables() -> dict:
    """name -> the table object (dicts and sets that the package may edit), captured
    before a test hides an attribute of torch to simulate renamed internals."""
    import torch._inductor.config as inductor_config
    from torch._decomp import decomposition_table, meta_table
    from torch._inductor.decomposition import decompositions
    from torch._inductor.fx_passes.reinplace import inplaceable_ops
    from torch._inductor.lowering import lowerings
    from torch._subclasses.fake_impls import op_implementations_dict

    from torch._dynamo import convert_frame
    from torch._dynamo.variables.functions import SkipFunctionVariable, UserFunctionVariable
    from torch._dynamo.variables.misc import AutogradFunctionVariable
    from torch._dynamo.variables.tensor import TensorVariable
    from torch._higher_order_ops import triton_kernel_wrap
    from torch._inductor import memory
    from torch._inductor.codegen import triton_utils
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    from inductor_addmm_fix.dynamo.function_attributes import attribute_entry

    from inductor_addmm_fix.triton_kernels import analysis_cache, float_args

    from inductor_addmm_fix.inductor.passes.post_grad_slot import PASSES

    return {
        # feature -> (owner, attribute) of each function and method it wraps
        "attributes": {
            "memory_estimate": [(memory, "compute_size_for_scheduler_buffer")],
            "triton_clones": [(triton_kernel_wrap, "clone_preserve_strides")],
            "triton_float_args": [(float_args.tensorify_caller(), "tensorify_python_scalars")],
            "triton_float_types": [
                (PythonWrapperCodegen, "define_user_defined_triton_kernel"), (triton_utils, "signature_of")
            ],
            "triton_analysis": [(triton_kernel_wrap, "generate_ttir"), (triton_kernel_wrap, "identify_mutated_tensors")],
            "triton_analysis_cache": [(triton_kernel_wrap, analysis_cache.analysis_name(triton_kernel_wrap))],
            "float_specializations": [(convert_frame, "_compile")],
            "static_strides": [(TensorVariable, "specialize")],
            "power_of_2_sizes": [(UserFunctionVariable, "call_function")],
            "function_attributes": [
                (AutogradFunctionVariable, "call_obj_hasattr"), (AutogradFunctionVariable, attribute_entry())
            ],
            "liger_head": [(UserFunctionVariable, "call_function"), (SkipFunctionVariable, "call_function")],
        },
        "decomp": decomposition_table,
        "meta": meta_table,
        "inductor": decompositions,
        "lowering": lowerings,
        "inplaceable": inplaceable_ops,
        "impls": torch.library._impls,
        "fake_impls": op_implementations_dict,
        "compiler_config": torch.compiler.config,
        "inductor_config": inductor_config,
        "passes": PASSES,
    }


def _entry(table, key):
    return id(table[key]) if key in table else None


def tables_snapshot(tables: dict | None = None) -> dict:
    """Every slot the package may touch, by feature: ``(feature, what, key) -> value``
    (table entries by identity, the dispatcher's kernels, the Python Meta and Autograd
    kernels, ``torch.library``'s bookkeeping), the cache key tag, the post-grad slot and
    the import hooks (``("shared", ...)``)."""
    tables = live_tables() if tables is None else tables
    aten = torch.ops.aten
    snap = {}
    for op in family_ops():
        for label in ("decomp", "meta", "inductor", "lowering", "fake_impls"):
            snap[("out_dtype", label, str(op))] = _entry(tables[label], op)
        for key in (torch._C.DispatchKey.Meta, torch._C.DispatchKey.Autograd):
            kernel = op.py_kernels.get(key)
            snap[("out_dtype", f"py_kernels[{key.name}]", str(op))] = None if kernel is None else id(kernel)
        qualname = f"{op._schema.name.split('::')[1]}.{op._overloadname}"
        snap[("out_dtype", "dispatcher", str(op))] = torch._C._dispatch_dump(f"aten::{qualname}")
        for key in ("Meta", "CPU"):
            snap[("out_dtype", f"torch.library._impls[{key}]", str(op))] = f"aten/{qualname}/{key}" in tables["impls"]
    for op in (aten.addmm.dtype, aten.addmm.default):
        snap[("reinplace", "inplaceable", str(op))] = _entry(tables["inplaceable"], op)
    inplace = [aten.addmm_.default]
    if hasattr(torch.ops.inductor_addmm_fix, "addmm_dtype_"):  # the package's op, defined on first use
        inplace.append(torch.ops.inductor_addmm_fix.addmm_dtype_.default)
    for op in inplace:  # reinplace's lowering, under accumulate_kernel's wrapper where that applies
        under, wrappers = _wrappers_of("accumulate_kernel", tables["lowering"].get(op))
        snap[("reinplace", "lowering", str(op))] = None if op not in tables["lowering"] else under
        snap[("accumulate_kernel", "lowering", str(op))] = wrappers
    for op in (aten.slice.Tensor, aten.select.int):
        snap[("views", "lowering", str(op))] = _entry(tables["lowering"], op)
    for name in ("slice_writes", "chunk_order", "accumulate_pairs"):
        snap[(name, "passes", name)] = [id(p) for n, p in tables["passes"].items() if n == name]
    for feature, slots in tables["attributes"].items():
        for owner, attr in slots:
            snap[(feature, "attribute", attr)] = _wrappers_of(feature, vars(owner).get(attr))
    snap[("shared", "cache_key_tag")] = tables["compiler_config"].cache_key_tag
    snap[("shared", "post_grad_custom_post_pass")] = id(tables["inductor_config"].post_grad_custom_post_pass)
    snap[("shared", "meta_path")] = tuple(type(finder).__qualname__ for finder in sys.meta_path)
    return snap


def _wrappers_of(feature: str, value) -> tuple:
    """What an attribute holds, for one feature: the object under every wrapper of this
    package (each wrapper names what it wraps ``stock``), and the wrappers of that
    feature's modules.  Two features may wrap one function (``triton_analysis`` and
    ``triton_analysis_cache`` on torch 2.8-2.11): each is seen apart from the other."""
    from inductor_addmm_fix.features import BY_NAME

    modules = {f"inductor_addmm_fix.{m}" for m in BY_NAME[feature].modules}
    own = []
    while hasattr(value, "stock") and getattr(value, "__module__", "").startswith("inductor_addmm_fix."):
        if value.__module__ in modules:
            own.append(id(value))
        value = value.stock
    return id(value), tuple(own)


def of_feature(snapshot: dict, feature: str) -> dict:
    return {key: value for key, value in snapshot.items() if key[0] == feature}


def differences(before: dict, after: dict) -> list[str]:
    """The slots that differ, for assertion messages."""
    return [str(key) for key in before.keys() | after.keys() if before.get(key) != after.get(key)]


@contextlib.contextmanager
def liger_mimic(path=None, module_name=None):
    """``tests/liger_flce_mimic.py`` (or the file ``path``) imported as Liger's FLCE
    module (``liger_kernel.ops.fused_linear_cross_entropy``, the name the package
    recognises; or ``module_name``), for the duration; whatever held that name before is
    put back."""
    import importlib.util
    import os

    from inductor_addmm_fix.dynamo.liger_head import MODULE as FLCE_MODULE

    name = module_name or FLCE_MODULE
    path = path or os.path.join(os.path.dirname(__file__), "liger_flce_mimic.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    before = sys.modules.get(name)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        if before is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = before


def aten_calls(fn) -> dict:
    """How many times each aten op ran during ``fn()`` (the profiler's CPU-side count)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn()
    return {event.key: event.count for event in profile.key_averages() if event.key.startswith("aten::")}


def token_scaling_step(liger):
    """One training step of Liger's FLCE (``liger``: the mimic's module) with
    ``use_token_scaling``: its loss, detached, after its backward."""
    def step(x, w, t):
        loss = liger.flce(x, w, t, use_token_scaling=True)[0]
        loss.backward()
        return loss.detach()

    return step
