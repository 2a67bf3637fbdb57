"""Unmodified Liger-Kernel FusedLinearCrossEntropy (and 0.8.5's fused linear JSD
and KL-div) compiled with Inductor and the plugin: same losses and gradients as
eager, and the out_dtype matmul provably lowered by Inductor."""

from __future__ import annotations

import collections
import dataclasses
import inspect

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor.custom_graph_pass import CustomGraphPass

from inductor_addmm_fix.inductor import hopper_accumulate
from inductor_addmm_fix.patching.counters import COUNTER

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
liger = pytest.importorskip("liger_kernel.transformers.functional", reason="needs liger-kernel")
from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss  # noqa: E402

SMALL = (4, 47, 31, 123)  # ragged chunking
REALISTIC = (8, 128, 1024, 4096)

# Liger's own FLCE test tolerances (test/transformers/test_fused_linear_cross_entropy.py).
TOLERANCE = {torch.bfloat16: dict(atol=5e-2, rtol=5e-2), torch.float16: dict(atol=1e-2, rtol=1e-2), torch.float32: dict(atol=1e-5, rtol=5e-4)}


@dataclasses.dataclass
class Case:
    shape: tuple = SMALL
    dtype: torch.dtype = torch.bfloat16  # operands
    weight_dtype: torch.dtype | None = None  # default: dtype
    autocast: torch.dtype | None = None
    bias: bool = False
    ce_weight: bool = False
    label_smoothing: float = 0.0
    lse_square_scale: float = 0.0
    softcap: float | None = None
    reduction: str = "mean"
    accum_dtype: torch.dtype | None = torch.float32
    api: str = "functional"  # or "module"
    no_grad: bool = False
    mode: str | None = None
    dynamic: bool = False
    # Liger calls .item(): by default Dynamo breaks the graph there; True captures the
    # scalar instead (one graph per step), as many training scripts configure.
    capture_scalars: bool = False


def make_inputs(case: Case):
    b, t, h, v = case.shape
    x = torch.randn(b * t, h, device="cuda", dtype=case.dtype, requires_grad=True)
    w = torch.randn(v, h, device="cuda", dtype=case.weight_dtype or case.dtype).mul_(h**-0.5).requires_grad_()
    target = torch.randint(v, (b * t,), device="cuda")
    target[::7] = -100  # ignored tokens
    bias = torch.randn(v, device="cuda", dtype=w.dtype, requires_grad=True) if case.bias else None
    ce_weight = torch.rand(v, device="cuda", dtype=torch.float32) if case.ce_weight else None
    return x, w, target, bias, ce_weight


def loss_fn(case: Case, ce_weight):
    kwargs = dict(
        ce_weight=ce_weight,
        label_smoothing=case.label_smoothing,
        lse_square_scale=case.lse_square_scale,
        softcap=case.softcap,
        reduction=case.reduction,
        accum_dtype=case.accum_dtype,
    )
    if case.api == "module":
        module = LigerFusedLinearCrossEntropyLoss(**kwargs)
        return lambda x, w, t, b: module(w, x, t, b)
    return lambda x, w, t, b: liger.liger_fused_linear_cross_entropy(x, w, t, b, **kwargs)


CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def run(case: Case, fn, tensors, compiled=False):
    x, w, target, bias, _ = tensors
    for t in (x, w, bias):
        if t is not None:
            t.grad = None
    if compiled and case.mode in CUDA_GRAPH_MODES:
        torch.compiler.cudagraph_mark_step_begin()  # one training step per call, as documented
    ctx = torch.autocast("cuda", dtype=case.autocast) if case.autocast else torch.autocast("cuda", enabled=False)
    # Clones: under CUDA graphs the outputs live in the graph's memory, which the next
    # replay overwrites (torch's documented contract: clone what outlives the step).
    if case.no_grad:
        with torch.no_grad(), ctx:
            return [fn(x, w, target, bias).detach().clone()]
    with ctx:
        loss = fn(x, w, target, bias)
    loss.backward()
    return [loss.detach().clone()] + [t.grad.clone() for t in (x, w, bias) if t is not None]


NAMES = ["loss", "grad_x", "grad_w", "grad_bias"]


def compare(case: Case, compiled_outs, eager_outs):
    exact = all(torch.equal(c, e) for c, e in zip(compiled_outs, eager_outs))
    diffs = {n: (c.double() - e.double()).abs().max().item() for n, c, e in zip(NAMES, compiled_outs, eager_outs)}
    print("max |compiled - eager|:", {n: f"{d:.3g}" for n, d in diffs.items()})
    if not exact:
        tol = TOLERANCE[case.autocast or case.dtype]
        for name, c, e in zip(["loss", "grad_x", "grad_w", "grad_bias"], compiled_outs, eager_outs):
            assert c.dtype == e.dtype, name
            torch.testing.assert_close(c, e, **tol, msg=lambda m, name=name: f"{name}: {m}")
    return exact


class CountOutDtypeMatmuls(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the out_dtype matmuls eager Liger really calls (its branches depend on
    version, dtypes, autocast and grad mode)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[-1] in ("dtype", "dtype_out"):
            self.count += 1
        return func(*args, **(kwargs or {}))


class CountingInductor(torch._TorchCompileInductorWrapper):
    """torch.compile's own Inductor backend (same mode and dynamic handling) that
    first counts the out_dtype matmuls in every graph Dynamo captured: an out_dtype
    matmul that ran eagerly after a graph break is not in any of them."""

    def __init__(self, mode, dynamic):
        super().__init__(mode, None, dynamic)
        self.captured = 0

    def __call__(self, gm, example_inputs):
        self.captured += sum(1 for n in gm.graph.nodes if n.op == "call_function" and "out_dtype" in n.kwargs)
        return super().__call__(gm, example_inputs)


class CountReachingInductor(CustomGraphPass):
    """post_grad_custom_pre_pass: counts the out_dtype matmul nodes (aten .dtype /
    .dtype_out overloads, by op) in the graphs Inductor is about to lower."""

    def __init__(self):
        self.reached = collections.Counter()

    def __call__(self, graph):
        for n in graph.nodes:
            if n.op == "call_function" and getattr(n.target, "_overloadname", None) in ("dtype", "dtype_out"):
                self.reached[f"{n.target._opname}.dtype"] += 1

    def uuid(self):
        return None


def lowered_by_plugin() -> collections.Counter:
    """The plugin's lowering counts by op ("addmm.dtype": n), in nodes that reached
    Inductor: the mm a product lowering runs inside an addmm lowering is not counted
    again, and a step that accumulates a pair of chunks (accumulate_pairs, which runs
    after the count of what reached Inductor) stands for the two nodes it replaced."""
    by_op = collections.Counter()
    for key, n in counters[COUNTER].items():
        by_op[key.split(":")[0]] += n
    if by_op["addmm.dtype"]:
        by_op["mm.dtype"] -= counters[COUNTER]["addmm.dtype:product_then_epilogue"]
        by_op["addmm.dtype"] += counters[COUNTER]["accumulate_pairs:pairs"]
    return by_op


@dataclasses.dataclass
class Run:
    eager_calls: int  # out_dtype matmuls eager Liger called (one step)
    captured: int  # out_dtype matmuls in the graphs Dynamo captured
    reached_by_op: collections.Counter  # out_dtype matmul nodes in the graphs given to Inductor
    lowered_by_op: collections.Counter  # lowered by the plugin
    graph_breaks: list
    exact: list

    @property
    def reached(self) -> int:
        return sum(self.reached_by_op.values())

    @property
    def lowered(self) -> int:
        return sum(self.lowered_by_op[op] for op in self.reached_by_op)

    def __str__(self):
        return (
            f"out_dtype matmuls: eager called {self.eager_calls}, Dynamo captured {self.captured}, "
            f"reached Inductor {dict(self.reached_by_op)}, lowered by the plugin {dict(self.lowered_by_op)} "
            f"{dict(counters[COUNTER])}; graph breaks: {self.graph_breaks}"
        )


def measured(eager_calls, backend, reaching) -> Run:
    breaks = [reason.splitlines()[0][:120] for reason in counters["graph_break"]]
    return Run(eager_calls.count, backend.captured, reaching.reached, lowered_by_plugin(), breaks, [])


def check(case: Case, calls=2) -> Run:
    """Eager, then compiled `calls` times on the same inputs: outputs compared with
    eager on every call; counts where the out_dtype matmul went."""
    tensors = make_inputs(case)
    fn = loss_fn(case, tensors[4])
    with torch._dynamo.config.patch(capture_scalar_outputs=case.capture_scalars):
        with CountOutDtypeMatmuls() as eager_calls:
            eager = run(case, fn, tensors)
        backend = CountingInductor(case.mode, case.dynamic)
        compiled_fn = torch.compile(fn, backend=backend, dynamic=case.dynamic)
        counters[COUNTER].clear()
        counters["graph_break"].clear()
        reaching = CountReachingInductor()
        with torch._inductor.config.patch(force_disable_caches=True, post_grad_custom_pre_pass=reaching):
            results = [run(case, compiled_fn, tensors, compiled=True) for _ in range(calls)]
    outcome = measured(eager_calls, backend, reaching)
    print(outcome)
    outcome.exact = [compare(case, r, eager) for r in results]
    return outcome


def assert_out_dtype_matmul_lowered(outcome: Run):
    """Where eager Liger calls the out_dtype addmm, compiled Liger captured it in a
    graph and every one that reached Inductor was lowered by the plugin."""
    if outcome.eager_calls == 0:
        assert outcome.reached == 0, outcome
        return
    assert outcome.captured >= 1, f"the out_dtype matmul ran outside the compiled graphs: {outcome}"
    assert outcome.reached >= 1, f"the out_dtype matmul did not reach Inductor: {outcome}"
    for op, n in outcome.reached_by_op.items():
        assert outcome.lowered_by_op[op] == n, f"some {op} was not lowered by the plugin: {outcome}"


FLCE_CASES = {
    "bf16": Case(),
    "fp16": Case(dtype=torch.float16),
    "bf16-sum": Case(reduction="sum"),
    "fp16-sum": Case(dtype=torch.float16, reduction="sum"),
    "module-bf16": Case(api="module"),
    "module-fp16-sum": Case(api="module", dtype=torch.float16, reduction="sum"),
    "fp32-weights-autocast-bf16": Case(dtype=torch.float32, autocast=torch.bfloat16, accum_dtype=None),
    "fp32-weights-autocast-fp16": Case(dtype=torch.float32, autocast=torch.float16, accum_dtype=None),
    "bias": Case(bias=True),
    "label-smoothing": Case(label_smoothing=0.1),
    "z-loss": Case(lse_square_scale=1e-4),
    "softcap": Case(softcap=30.0),
    "realistic-bf16": Case(shape=REALISTIC),
    "realistic-fp16-sum": Case(shape=REALISTIC, dtype=torch.float16, reduction="sum"),
}


@pytest.mark.parametrize("case", FLCE_CASES.values(), ids=FLCE_CASES.keys())
def test_flce_compiled_matches_eager(case):
    assert_out_dtype_matmul_lowered(check_or_fail_as_stock_does(case))


CLASS_WEIGHT_CASES = {
    # fp32, accum_dtype=None: stock Inductor gives a different loss on every call (the views feature fixes it)
    "fp32-sum-small": Case(dtype=torch.float32, accum_dtype=None, ce_weight=True, reduction="sum"),
    "fp32-mean-small": Case(dtype=torch.float32, accum_dtype=None, ce_weight=True),
    "fp32-sum-realistic": Case(shape=REALISTIC, dtype=torch.float32, accum_dtype=None, ce_weight=True, reduction="sum"),
    "bf16-fp32-accum": Case(ce_weight=True),
    "bf16-fp32-accum-realistic": Case(shape=REALISTIC, ce_weight=True, reduction="sum"),
}


@pytest.mark.class_weights
@pytest.mark.parametrize("case", CLASS_WEIGHT_CASES.values(), ids=CLASS_WEIGHT_CASES.keys())
def test_flce_with_class_weights_matches_eager_on_every_call(case):
    """Run apart (-m class_weights): on stock Inductor this case reads freed memory."""
    assert_out_dtype_matmul_lowered(check(case, calls=3))


@pytest.mark.parametrize("capture_scalars", [False, True], ids=["default-config", "capture-scalars"])
def test_flce_forward_under_no_grad_with_inputs_requiring_grad(capture_scalars):
    """Liger computes grad_weight inside its forward even under no_grad (eager calls
    the out_dtype addmm) although nothing will read it.  Compiled, Dynamo captures the
    addmm; where the whole forward is one graph (capture_scalar_outputs) AOTAutograd
    removes it as dead code before Inductor, otherwise Inductor lowers it with the
    plugin.  Either way the loss matches eager and nothing ran outside the graphs."""
    outcome = check(Case(no_grad=True, capture_scalars=capture_scalars))
    assert outcome.eager_calls >= 1 and outcome.captured >= 1, outcome
    assert outcome.lowered == outcome.reached, outcome
    if capture_scalars:
        assert outcome.reached == 0, f"expected the unused grad_weight to be dead code: {outcome}"
    else:
        assert outcome.reached >= 1, outcome


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else "")[:120]


def check_or_fail_as_stock_does(case: Case, calls=2) -> Run:
    """check(case); if it raises, the same case on Liger's path without out_dtype
    (accum_dtype=None) with the plugin uninstalled (stock Inductor) must raise the
    same error, and the test is reported xfail with it: a failure that is not the
    plugin's.  Any other failure fails the test."""
    import inductor_addmm_fix as fix

    try:
        return check(case, calls)
    except Exception as error:  # noqa: BLE001 - compared with the control below
        control = dataclasses.replace(case, accum_dtype=None)
        fix.uninstall()
        torch._dynamo.reset()
        try:
            check(control, calls)
        except Exception as stock_error:  # noqa: BLE001
            same = type(stock_error) is type(error) and _first_line(stock_error) == _first_line(error)
            if not same:
                raise AssertionError(f"with the plugin: {error!r}\nstock control: {stock_error!r}") from error
        else:
            raise AssertionError(f"fails with the plugin, the stock control passes: {error!r}") from error
        finally:
            fix.install()
            torch._dynamo.reset()
        pytest.xfail(f"stock Inductor fails the same way without out_dtype: {type(error).__name__}: {_first_line(error)}")


MODES = {
    "default": Case(),
    "max-autotune": Case(mode="max-autotune"),
    "reduce-overhead": Case(mode="reduce-overhead"),
    "dynamic": Case(dynamic=True),
    "max-autotune-no-cudagraphs": Case(mode="max-autotune-no-cudagraphs"),
    "default-capture-scalars": Case(capture_scalars=True),
    # pytorch/pytorch#189123 (open): graph partitions hand CUDA graph trees a float from .item()
    "reduce-overhead-capture-scalars": Case(mode="reduce-overhead", capture_scalars=True),
}


@pytest.mark.parametrize("case", MODES.values(), ids=MODES.keys())
def test_flce_compile_modes(case):
    assert_out_dtype_matmul_lowered(check_or_fail_as_stock_does(case, calls=3))


def _has(name, param=None):
    fn = getattr(liger, name, None)
    return fn is not None and (param is None or param in inspect.signature(fn).parameters)


def assert_compiled_matches_eager(fn, x, w, dtype, *, loops_traced=False):
    """fn(x, w) -> loss; compiled and eager losses and gradients agree, and every
    out_dtype matmul eager calls was captured and lowered by the plugin (``loops_traced``:
    under ``INDUCTOR_ADDMM_FIX_LIGER_HEAD=loop``, where the package traces Liger's
    dispatch, none may run eagerly)."""

    def run_once(f):
        x.grad = w.grad = None
        loss = f(x, w)
        loss.backward()
        return [loss.detach(), x.grad, w.grad]

    with CountOutDtypeMatmuls() as eager_calls:
        eager = run_once(fn)
    backend = CountingInductor(None, False)
    counters[COUNTER].clear()
    counters["graph_break"].clear()
    reaching = CountReachingInductor()
    with torch._inductor.config.patch(force_disable_caches=True, post_grad_custom_pre_pass=reaching):
        compiled = run_once(torch.compile(fn, backend=backend))
    outcome = measured(eager_calls, backend, reaching)
    print(outcome)
    for c, e in zip(compiled, eager):
        if not torch.equal(c, e):
            torch.testing.assert_close(c, e, **TOLERANCE[dtype])
    assert outcome.eager_calls >= 1, "this Liger calls no out_dtype matmul here: nothing to prove"
    for op, n in outcome.reached_by_op.items():
        assert outcome.lowered_by_op[op] == n, f"some {op} was not lowered by the plugin: {outcome}"
    if outcome.captured < outcome.eager_calls and not loops_traced:
        # Liger 0.8.5 routes these losses through dispatch(), which is
        # torch.compiler.disable'd: a graph break inside the chunk loop, so Dynamo
        # runs that loop (and the out_dtype addmm in it) eagerly.  Not the plugin's.
        assert any("compiler.disable" in b for b in outcome.graph_breaks), outcome
        pytest.xfail(
            f"{outcome.eager_calls - outcome.captured} of {outcome.eager_calls} out_dtype matmuls run eagerly: "
            "Liger's dispatch() is torch.compiler.disable'd inside the chunk loop"
        )
    assert outcome.captured == outcome.eager_calls, outcome


@pytest.fixture(params=["auto", "loop"])
def loss_loops(request, monkeypatch):
    """The setting under which JSD and KL-div compile: ``auto`` takes the package's op
    for their forward (Liger's own function), ``loop`` traces their loops."""
    monkeypatch.setenv("INDUCTOR_ADDMM_FIX_LIGER_HEAD", request.param)
    torch._dynamo.reset()
    return request.param == "loop"


def assert_compiled_runs_liger_s_op(fn, x, w, loss):
    """Under ``auto``: one graph, no break, Liger's forward run once by the package's op,
    and eager's loss and gradients bit for bit (the same code on the same inputs)."""

    def run_once(f):
        x.grad = w.grad = None
        value = f(x, w)
        value.backward()
        return [value.detach(), x.grad, w.grad]

    eager = run_once(fn)
    counters.clear()
    compiled = run_once(torch.compile(fn))
    seen = dict(counters[COUNTER])
    assert seen.get(f"liger_head:{loss}:run") == 1 and seen.get("liger_head:distill:backward") == 1, seen
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    for c, e in zip(compiled, eager):
        assert c.dtype == e.dtype and torch.equal(c, e)


def student(dtype, bt=4 * 47, h=31, v=123):
    x = torch.randn(bt, h, device="cuda", dtype=dtype, requires_grad=True)
    w = (torch.randn(v, h, device="cuda", dtype=dtype) * h**-0.5).requires_grad_()
    return x, w


@pytest.mark.skipif(not _has("liger_fused_linear_jsd", "accum_dtype"), reason="this Liger's JSD has no accum_dtype")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_fused_linear_jsd_matches_eager(dtype, loss_loops):
    s_x, s_w = student(dtype)
    t_x = torch.randn_like(s_x).detach()
    t_w = torch.randn_like(s_w).detach() * s_w.shape[1] ** -0.5

    def fn(s_x, s_w):
        return liger.liger_fused_linear_jsd(s_x, s_w, t_x, t_w, accum_dtype=torch.float32)

    if not loss_loops:
        return assert_compiled_runs_liger_s_op(fn, s_x, s_w, "jsd")
    assert_compiled_matches_eager(fn, s_x, s_w, dtype, loops_traced=loss_loops)


@pytest.mark.skipif(not _has("liger_fused_linear_kl_div", "accum_dtype"), reason="this Liger has no fused_linear_kl_div")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_fused_linear_kl_div_matches_eager(dtype, loss_loops):
    x, w = student(dtype)
    target = torch.log_softmax(torch.randn(x.shape[0], w.shape[0], device="cuda"), dim=-1).to(dtype)

    def fn(x, w):
        return liger.liger_fused_linear_kl_div(x, w, target, accum_dtype=torch.float32)

    if not loss_loops:
        return assert_compiled_runs_liger_s_op(fn, x, w, "kl_div")
    assert_compiled_matches_eager(fn, x, w, dtype, loops_traced=loss_loops)


def jsd_loop_case(dtype, accum_dtype=torch.float32):
    """Liger's JSD over 8 chunks on a Hopper GPU (chunk count ceil(V / H) budget)."""
    s_x, s_w = student(dtype, bt=64, h=64, v=512)
    t_x, t_w = torch.randn_like(s_x).detach(), (torch.randn_like(s_w) * 64**-0.5).detach()
    return (lambda x, w: liger.liger_fused_linear_jsd(x, w, t_x, t_w, accum_dtype=accum_dtype)), s_x, s_w


def jsd_accum_none_loop_case(dtype):
    """:func:`jsd_loop_case` accumulating in the weight's dtype."""
    return jsd_loop_case(dtype, accum_dtype=None)


def kl_div_loop_case(dtype, bt=256):
    """Liger's KL-div over several chunks (its budget is ceil(V / 16 H))."""
    x, w = student(dtype, bt=bt, h=32, v=2048)
    target = torch.log_softmax(torch.randn(bt, 2048, device="cuda"), dim=-1).to(dtype)
    return (lambda x, w: liger.liger_fused_linear_kl_div(x, w, target, accum_dtype=torch.float32)), x, w


@pytest.mark.skipif(not _has("liger_fused_linear_kl_div", "accum_dtype"), reason="this Liger has no fused_linear_kl_div")
@pytest.mark.parametrize("case", [jsd_loop_case, kl_div_loop_case], ids=["jsd", "kl_div"])
def test_traced_loss_loops_accumulate_each_chunk_once_paired_or_in_place(case, monkeypatch):
    """Under ``loop``, the chunks of JSD's and KL-div's weight-gradient accumulation keep
    their order (chunk_order), consecutive chunks are merged in pairs (accumulate_pairs, on
    the pair kernel on Hopper where it takes the accumulator's size), and every
    accumulation step, a pair or a chunk left alone, runs in place (reinplace): one step
    per chunk not merged into the step before it."""
    monkeypatch.setenv("INDUCTOR_ADDMM_FIX_LIGER_HEAD", "loop")
    torch._dynamo.reset()
    counters[COUNTER].clear()
    fn, x, w = case(torch.bfloat16)
    with torch._inductor.config.patch(force_disable_caches=True):
        torch.compile(fn)(x, w).backward()
    seen = dict(counters[COUNTER])
    chunks = seen.get("chunk_order:chunks", 0)
    in_place = sum(n for name, n in seen.items() if name.endswith(":accumulate_in_place"))
    assert seen.get("liger_head:dispatch:traced", 0) > 0, seen
    assert chunks > 1, seen
    assert seen.get("accumulate_pairs:pairs", 0) > 0, seen
    assert in_place == chunks - seen["accumulate_pairs:pairs"], seen
    if torch.cuda.get_device_capability()[0] == 9:  # the pair kernel takes accumulators of its sizes only
        takes = hopper_accumulate.sizes_supported(torch.float32, w.shape[0], w.shape[1], 1)
        assert seen.get("pair:hopper_accumulate", 0) == (seen["accumulate_pairs:pairs"] if takes else 0), seen


@pytest.mark.skipif(not _has("liger_fused_linear_kl_div", "accum_dtype"), reason="this Liger has no fused_linear_kl_div")
def test_traced_kl_div_loop_compiles_with_a_symbolic_token_count(monkeypatch):
    """Liger's KL-div kernel takes ``scale=1 / BT``: with BT symbolic, a float of a
    symbolic size, which the kernel's compiled signature must type as a float."""
    monkeypatch.setenv("INDUCTOR_ADDMM_FIX_LIGER_HEAD", "loop")
    torch._dynamo.reset()
    for bt in (96, 80, 72):  # 3 chunks each
        fn, x, w = kl_div_loop_case(torch.bfloat16, bt)
        eager = fn(x, w)
        compiled = torch.compile(fn, dynamic=True)(x, w)
        assert compiled.dtype == eager.dtype == torch.float32
        torch.testing.assert_close(compiled, eager, **TOLERANCE[torch.bfloat16])


@pytest.mark.skipif(not _has("liger_fused_linear_kl_div", "accum_dtype"), reason="this Liger has no fused_linear_kl_div")
@pytest.mark.parametrize("case, loss", [(jsd_loop_case, "jsd"), (jsd_accum_none_loop_case, "jsd"), (kl_div_loop_case, "kl_div")],
                         ids=["jsd-fp32", "jsd-accum-None", "kl_div"])  # fmt: skip
def test_a_fixed_length_under_auto_compiles_the_loss_loop_after_promote_after_steps(case, loss, monkeypatch):
    """Under ``auto``, a static graph of a 4- to 32-chunk loop without labels runs the
    package's op for PROMOTE_AFTER steps, then Liger's loop compiled (its ``dispatch()``
    traced), in the model's graph, with eager's results within bf16's tolerance."""
    from inductor_addmm_fix.dynamo import liger_head_op

    monkeypatch.setenv("INDUCTOR_ADDMM_FIX_LIGER_HEAD", "auto")
    torch._dynamo.reset()
    liger_head_op.reset_tiers()
    counters.clear()
    fn, x, w = case(torch.bfloat16)
    compiled = torch.compile(fn)
    for _ in range(liger_head_op.PROMOTE_AFTER + 2):
        x.grad = w.grad = None
        got = compiled(x, w)
        got.backward()
    got_grads = [x.grad, w.grad]
    x.grad = w.grad = None
    want = fn(x, w)
    want.backward()
    seen = dict(counters[COUNTER])
    assert seen.get(f"liger_head:{loss}:run") == liger_head_op.PROMOTE_AFTER, seen
    assert seen.get("liger_head:promoted") == 1 and seen.get(f"liger_head:{loss}:loop:promoted", 0) >= 1, seen
    assert seen.get("liger_head:dispatch:traced", 0) > 0, seen
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, **TOLERANCE[torch.bfloat16])
    for a, b in zip(got_grads, [x.grad, w.grad]):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, **TOLERANCE[torch.bfloat16])
    liger_head_op.reset_tiers()
