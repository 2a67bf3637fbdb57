"""What a user Triton kernel reads and writes is worked out once per kernel and signature:
a call whose kernel, argument dtypes, constants and symbolic values match one analysed
before gets the answer without compiling the kernel to Triton IR again; any other call
is analysed as before.

The analysis needs Triton but no GPU (``analysis.analysis_target``).  Arguments are fake
tensors, as AOTAutograd and Inductor pass them."""

import logging
import types

import pytest
import sympy
import torch
import torch._inductor.compile_fx  # noqa: F401  (the features here apply once Inductor is imported)
from torch._dynamo.utils import counters
from torch._higher_order_ops import triton_kernel_wrap as tkw
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import inductor_addmm_fix
from inductor_addmm_fix.triton_kernels import analysis, analysis_cache

pytestmark = pytest.mark.skipif(not analysis.triton_available(), reason="needs triton")
FAILED = "Encountered an exception in identify_"  # torch's warning: "... assuming every input is mutated"


# ---------------------------------------------------------------- helpers
def analyse(kernel, arguments: dict):
    """The installed analysis's answer for ``kernel`` called with ``arguments``."""
    with analysis.analysis_target():
        return getattr(tkw, analysis_cache.analysis_name(tkw))(kernel, dict(arguments), {})


def the_cache():
    """The package's caching analysis among the wrappers of torch's analysis: on top after
    a fresh install, under ``triton_analysis``'s wrapper after that feature is installed
    again (each wrapper calls the one under it)."""
    wrapper = getattr(tkw, analysis_cache.analysis_name(tkw))
    while not hasattr(wrapper, "answers"):
        if not getattr(wrapper, "splices", False):
            return None  # not installed
        wrapper = wrapper.stock
    return wrapper


def written(answer) -> list[str]:
    """The names an answer reports written (a list on torch 2.8-2.11, accesses on 2.12+)."""
    if isinstance(answer, list):
        return sorted(answer)
    return sorted(dep.name for dep in answer.read_writes.writes)


@pytest.fixture(autouse=True)
def nothing_kept():
    """Each test starts with no answer kept and no event counted."""
    cache = the_cache()
    if cache is not None:
        cache.answers.clear()
    counters["inductor_addmm_fix"].clear()


@pytest.fixture
def compiles(monkeypatch):
    """How many times the kernel was compiled to Triton IR since the test began."""
    calls = []
    generate = tkw.generate_ttir

    def counting(*args, **kwargs):
        calls.append(args[0])
        return generate(*args, **kwargs)

    monkeypatch.setattr(tkw, "generate_ttir", counting)
    return lambda: len(calls)


def events() -> dict:
    return {k.split(":")[1]: v for k, v in counters["inductor_addmm_fix"].items() if k.startswith("triton_analysis_cache:")}


FAKE = FakeTensorMode()


def fake(n: int = 8, dtype=torch.float32) -> torch.Tensor:
    with FAKE:
        return torch.empty(n, dtype=dtype)


def kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def scale(x_ptr, out_ptr, n, s, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) * s, mask=i < n)

    @triton.jit
    def copy(x_ptr, out_ptr, n, s, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n), mask=i < n)

    @triton.jit
    def one_of_two(a_ptr, b_ptr, FIRST: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        if FIRST:
            tl.store(a_ptr + i, tl.load(b_ptr + i))
        else:
            tl.store(b_ptr + i, tl.load(a_ptr + i))

    @triton.jit
    def broken(x_ptr, out_ptr, BLOCK: tl.constexpr):  # a pointer plus a pointer: no Triton IR
        i = tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(x_ptr + out_ptr))

    return types.SimpleNamespace(scale=scale, copy=copy, one_of_two=one_of_two, broken=broken)


def vectors(**changes) -> dict:
    return {"x_ptr": fake(), "out_ptr": fake(), "n": 8, "s": 2.5, "BLOCK": 8, **changes}


# ---------------------------------------------------------------- one analysis per signature
def test_a_kernel_called_again_with_the_same_signature_is_compiled_once(compiles):
    answers = [written(analyse(kernels().scale, vectors())) for _ in range(3)]  # fresh fake tensors each call
    assert answers == [["out_ptr"]] * 3
    assert compiles() == 1
    assert events() == {"miss": 1, "hit": 2}


def test_the_kept_answer_is_the_analysis_s_own():
    k = kernels()
    for kernel, arguments in [(k.scale, vectors()), (k.copy, vectors()), (k.one_of_two, {"a_ptr": fake(), "b_ptr": fake(), "FIRST": True, "BLOCK": 8})]:
        analyse(kernel, arguments)
        kept = analyse(kernel, arguments)
        with analysis.analysis_target():
            own = the_cache().stock(kernel, dict(arguments), {})
        assert written(kept) == written(own)
        assert kept == own


def test_symbolic_values_share_one_answer(compiles):
    for n in (sympy.Symbol("s0"), sympy.Symbol("s1") * 2, sympy.Symbol("s0")):
        assert written(analyse(kernels().scale, vectors(n=n))) == ["out_ptr"]
    assert compiles() == 1


@pytest.mark.parametrize(
    "change",
    [{"x_ptr": fake(dtype=torch.bfloat16)}, {"s": 3.5}, {"s": -0.0}, {"n": 1}, {"BLOCK": 16}],
    ids=["a tensor's dtype", "a float", "a float's sign", "an int of 1", "a constexpr"],
)
def test_a_call_that_differs_in_what_triton_is_given_is_analysed_again(compiles, change):
    analyse(kernels().scale, vectors(s=0.0))
    analyse(kernels().scale, {**vectors(s=0.0), **change})
    assert compiles() == 2


def test_a_constexpr_that_changes_what_is_written_gets_its_own_answer():
    one_of_two = kernels().one_of_two
    for first, expected in [(True, ["a_ptr"]), (False, ["b_ptr"]), (True, ["a_ptr"]), (False, ["b_ptr"])]:
        assert written(analyse(one_of_two, {"a_ptr": fake(), "b_ptr": fake(), "FIRST": first, "BLOCK": 8})) == expected


def test_another_kernel_with_the_same_arguments_is_analysed_again(compiles):
    k = kernels()
    assert written(analyse(k.scale, vectors())) == ["out_ptr"]
    assert written(analyse(k.copy, vectors())) == ["out_ptr"]
    assert compiles() == 2


def test_real_tensors_are_analysed_at_every_call(compiles):
    for _ in range(2):
        assert written(analyse(kernels().scale, vectors(x_ptr=torch.zeros(8), out_ptr=torch.zeros(8)))) == ["out_ptr"]
    assert compiles() == 2
    assert events() == {"uncached": 2}


def test_each_caller_gets_its_own_copy_of_the_answer():
    first = analyse(kernels().scale, vectors())
    if isinstance(first, list):
        first.append("x_ptr")
    else:
        first.read_writes.writes.clear()
    assert written(analyse(kernels().scale, vectors())) == ["out_ptr"]


def test_the_answers_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(analysis_cache, "KEPT", 2)
    for block in (8, 16, 32):
        analyse(kernels().scale, vectors(BLOCK=block))
    assert len(the_cache().answers) == 2


def test_a_kernel_whose_analysis_fails_is_taken_as_writing_every_tensor_and_warned_about_once(caplog):
    caplog.set_level(logging.WARNING, logger=tkw.log.name)
    for _ in range(3):
        assert written(analyse(kernels().broken, {"x_ptr": fake(), "out_ptr": fake(), "BLOCK": 8})) == ["out_ptr", "x_ptr"]
    assert len([r for r in caplog.records if FAILED in r.getMessage()]) == 1


def test_the_cache_answers_alike_under_or_over_the_other_analysis_wrapper():
    """Installed again, ``triton_analysis`` wraps torch's analysis above the cache instead
    of below it: the answers are the same, and a repeated call is still answered from the
    cache."""
    k = kernels()
    calls = [(k.scale, vectors()), (k.one_of_two, {"a_ptr": fake(), "b_ptr": fake(), "FIRST": False, "BLOCK": 8})]
    fresh = [written(analyse(kernel, arguments)) for kernel, arguments in calls]
    inductor_addmm_fix.install(features="-triton_analysis")
    inductor_addmm_fix.install()
    if getattr(tkw, analysis_cache.analysis_name(tkw)) is the_cache():
        pytest.skip("triton_analysis does not wrap the analysis on this torch")  # not needed here
    for _ in range(2):
        counters["inductor_addmm_fix"].clear()
        assert [written(analyse(kernel, arguments)) for kernel, arguments in calls] == fresh
    assert events() == {"hit": len(calls)}


def test_without_the_feature_each_call_is_compiled_again(compiles):
    inductor_addmm_fix.install(features="-triton_analysis_cache")
    for _ in range(3):
        analyse(kernels().scale, vectors())
    assert compiles() == 3
    assert events() == {}


# ---------------------------------------------------------------- in a traced loop
def test_a_functionalized_loop_of_kernel_calls_analyses_the_kernel_once(compiles):
    """AOTAutograd's functionalization of a chunked loop (one kernel call per chunk, as
    Liger's FLCE calls its cross-entropy kernel): one analysis, and every call copies
    only the tensor it writes."""
    kernel = tkw.kernel_side_table.add_kernel(kernels().scale)
    constants = tkw.kernel_side_table.add_constant_args({"s": 2.5, "BLOCK": 8})

    def loop(x, out):
        for chunk in range(16):
            tkw.triton_kernel_wrapper_mutation(
                kernel_idx=kernel, constant_args_idx=constants, grid=[(1, 1, 1)], tma_descriptor_metadata={},
                kwargs={"x_ptr": x[chunk], "out_ptr": out[chunk], "n": 8},
            )
        return out

    with analysis.analysis_target():
        gm = make_fx(torch.func.functionalize(loop), tracing_mode="fake")(torch.zeros(16, 8), torch.zeros(16, 8))
    calls = gm.graph.find_nodes(op="call_function", target=tkw.triton_kernel_wrapper_functional)
    assert len(calls) == 16
    assert all(call.kwargs["tensors_to_clone"] == ["out_ptr"] for call in calls)
    assert compiles() == 1
    assert events()["miss"] == 1 and events()["hit"] >= 15
