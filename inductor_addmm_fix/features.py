"""The features a user can name: each one the patch modules that make it up.

Each feature is the list of patch modules that make it up, by the stage at which they
apply (``STAGES``): ``core`` modules as soon as torch is imported (what eager mode
meets), ``tracing`` modules once ``torch._dynamo`` is (every tracer imports it first:
Dynamo, AOTAutograd, export, any ``FakeTensorMode``), ``inductor`` modules once
``torch._inductor.compile_fx`` is (the first compile: the Dynamo and AOTAutograd
patches apply then too, before any graph reaches them).  So a process that never
compiles pays for the ``core`` modules only.  Each feature is its own failure domain: if any of its modules
cannot plan, apply or pass its self-test on the installed torch, that feature alone
is rolled back (all its layers) and warned about once.  Machinery that several
features share (the post-grad pass slot, the cache-key tag) is applied while a
feature that needs it is.

A feature names modules, never functions: what a module defines for the installer
(``plan()``, and hooks such as ``self_test()`` or ``settings()``) is declared in
``patching/protocol.py`` and found on the module by that name.

How a selection of features is written, and its one parser: ``activation/selection.py``.

Imported at interpreter start-up: this module imports nothing.
"""

from __future__ import annotations


class Feature:
    """A feature: its name and the modules that make it up."""

    __slots__ = ("name", "core", "tracing", "inductor", "standins", "machinery", "needs")

    def __init__(self, name, *, core=(), tracing=(), inductor=(), standins=None, machinery=("cache_key",), needs=()):
        self.name = name
        # features it builds on (earlier in the table): off while one of them is; a module
        # of this feature imports a module of another feature only if it is named here
        self.needs = tuple(needs)
        self.core = tuple(core)  # patch modules applied at `import torch`, in the order they plan
        self.tracing = tuple(tracing)  # patch modules applied when torch._dynamo is imported
        # stage -> modules of an earlier stage whose patches stand in for it until it applies
        # (removed when it begins; their patches' names start with the module's name)
        self.standins = dict(standins or {})
        self.inductor = tuple(inductor)  # patch modules of Inductor, in the order they plan
        self.machinery = tuple(machinery)  # shared machinery it needs (keys of MACHINERY)

    @property
    def modules(self) -> tuple:
        """Its patch modules, stage by stage."""
        return tuple(m for stage in STAGES for m in getattr(self, stage))

    def __repr__(self) -> str:
        return f"Feature({self.name!r})"


FEATURE_TABLE = (
    # Matmuls with out_dtype= (mm, bmm, addmm, baddbmm) trace and compile.
    Feature(
        "out_dtype",
        core=("core.eager_cpu", "core.meta_trigger"),
        tracing=("core.meta_kernels", "core.decompositions", "core.no_derivative"),
        standins={"tracing": ("core.meta_trigger",)},
        inductor=("inductor.decompositions", "inductor.lowerings"),
    ),
    # Accumulation chains (addmm(acc, ..., out=acc)) run in place, as in eager.
    Feature("reinplace", inductor=("inductor.reinplace",)),
    # Inductor's peak-memory estimate counts those in-place accumulations as writes, not allocations.
    Feature("memory_estimate", inductor=("inductor.out_fallback_sizes",), needs=("reinplace",)),
    # In-place accumulates on Hopper GPUs run the package's kernel where it beats cuBLAS.
    Feature("accumulate_kernel", inductor=("inductor.accumulate_kernel",), needs=("reinplace",)),
    # as_strided of a slice of an unrealized buffer reads the buffer's storage, as in eager.
    Feature("views", inductor=("inductor.views",)),
    # Chunked writes into slices of one buffer write only their slice (post-grad pass).
    Feature("slice_writes", inductor=("inductor.passes.slice_writes",), machinery=("post_grad_slot", "cache_key")),
    # Chunked accumulation loops keep their chunk order (post-grad pass).
    Feature("chunk_order", inductor=("inductor.passes.chunk_order",), machinery=("post_grad_slot", "cache_key")),
    # Chunked accumulations update their accumulator once per two chunks (post-grad pass).
    Feature(
        "accumulate_pairs", inductor=("inductor.passes.accumulate_pairs",), machinery=("post_grad_slot", "cache_key")
    ),
    # A user Triton kernel writing a view gets a copy of the view, not of its storage.
    Feature("triton_clones", inductor=("triton_kernels.clones",)),
    # Float arguments of user Triton kernels are read at run time, not specialized.
    Feature("triton_float_args", inductor=("triton_kernels.float_args",)),
    # Float arguments of user Triton kernels are fp32 in the compiled kernel, as Triton's JIT makes them.
    Feature("triton_float_types", inductor=("triton_kernels.float_types",)),
    # The analysis of what a user Triton kernel writes compiles its scalar arguments as arguments.
    Feature("triton_analysis", inductor=("triton_kernels.analysis",)),
    # What a user Triton kernel reads and writes is worked out once per kernel and signature.
    Feature("triton_analysis_cache", inductor=("triton_kernels.analysis_cache",)),
    # A float Dynamo specializes in one frame's compile is not specialized in the next frames.
    Feature("float_specializations", inductor=("dynamo.float_specializations",)),
    # Dynamo answers the strides of a static-shaped tensor with ints.
    Feature("static_strides", inductor=("dynamo.static_strides",)),
    # Dynamo finds triton.next_power_of_2 of a symbolic size by comparisons, not bit twiddling.
    Feature("power_of_2_sizes", inductor=("dynamo.power_of_2_sizes",)),
    # Dynamo answers hasattr and plain class attributes of an autograd Function, with guards.
    Feature("function_attributes", inductor=("dynamo.function_attributes",)),
    # Liger FLCE's forward is one opaque op where its chunk loop would recompile per length;
    # under the loop setting, JSD's and KL-div's chunk loops are compiled too.
    Feature("liger_head", inductor=("dynamo.liger_head", "dynamo.liger_dispatch")),
)

#: The stages in the order they apply, each with the module whose import triggers it
#: (``torch``: applied by ``install()`` itself, which imports torch).
STAGES = {"core": "torch", "tracing": "torch._dynamo", "inductor": "torch._inductor.compile_fx"}

#: Shared machinery -> its module, in the order applied (after the features of a stage).
MACHINERY = {
    "post_grad_slot": "inductor.passes.post_grad_slot",
    "cache_key": "inductor.cache_key",
}

NAMES = tuple(f.name for f in FEATURE_TABLE)
BY_NAME = {f.name: f for f in FEATURE_TABLE}
