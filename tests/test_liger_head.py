"""Liger's FLCE forward under compile: one opaque op where the token count is symbolic,
its chunk loop where it is static (``INDUCTOR_ADDMM_FIX_LIGER_HEAD``: auto, loop, opaque).

On the CPU, Liger's module is ``tests/liger_flce_mimic.py`` (Liger's forward in pure
torch, its autograd.Function, imported under Liger's module name): the results are
compared with float64 math and with eager runs of the same code.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

from helpers import graph_breaks, liger_mimic, many_recompiles, token_scaling_step, without_graph_caches
from inductor_addmm_fix.patching import warn
from inductor_addmm_fix import installer
from inductor_addmm_fix import settings
from inductor_addmm_fix.dynamo import liger_head, liger_head_op
from inductor_addmm_fix.patching.counters import COUNTER

H, V = 16, 128  # Liger's chunks: next_power_of_2(cdiv(BT, 8)) rows, 5 to 8 of them below
#: token counts giving Liger 6, 7, 5, 8, 6 and 7 chunks: every length new, and after the
#: second every chunk count too, up to the last two
LENGTHS = (41, 49, 17, 57, 21, 25)


def inputs(rows, *, dtype=torch.float64, bias=False, weight_grad=True, input_grad=True, ignore_index=-100, vocab=V):
    x = torch.randn(rows, H, dtype=dtype).requires_grad_(input_grad)
    w = (torch.randn(vocab, H, dtype=dtype) * 0.2).requires_grad_(weight_grad)
    t = torch.randint(0, vocab, (rows,))
    t[::5] = ignore_index
    b = (torch.randn(vocab, dtype=dtype) * 0.1).requires_grad_() if bias else None
    return x, w, t, b


def clones(*tensors):
    return [None if t is None else t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


def liger_chunks(rows: int) -> int:
    chunk = 1
    while chunk < -(-rows // -(-V // H)):
        chunk *= 2
    return -(-rows // chunk)


def graphs() -> int:
    return counters["stats"]["unique_graphs"]


def events(name: str) -> int:
    """``liger_head:<name>*`` events counted: ``run`` while the op runs, the others while
    Dynamo traces (torch 2.8 may drop those of a frame it traced twice: tests assert on
    ``run``)."""
    return sum(n for key, n in counters[COUNTER].items() if key.startswith(f"liger_head:{name}"))


def training_step(module):
    def step(x, w, t, b):
        loss = module.flce(x, w, t, b)[0]
        loss.backward()
        return loss.detach()

    return step


def reference_step(x, w, t, b):
    """Float64 cross entropy of the full logits: loss and gradients."""
    logits = x @ w.t() + (b if b is not None else 0)
    loss = F.cross_entropy(logits, t, ignore_index=-100)
    loss.backward()
    return loss.detach()


def assert_matches_float64(got, ref, tensors, ref_tensors):
    """Liger computes its loss and the logits' gradient in float32: float32's error."""
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-7)
    for a, b in zip(tensors, ref_tensors):
        if b is not None and b.grad is not None:
            assert a.grad.dtype == b.grad.dtype
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7)


def step_matches_float64(step, tensors) -> None:
    """Run ``step`` on ``tensors`` and check its loss and gradients against float64 math
    on copies of them."""
    ref_tensors = clones(*tensors)
    assert_matches_float64(step(*tensors), reference_step(*ref_tensors), tensors, ref_tensors)


@pytest.fixture(autouse=True)
def fresh_counters():
    counters.clear()
    liger_head_op.reset_tiers()
    yield
    liger_head_op.reset_tiers()


def test_changing_lengths_compile_two_graph_sets_and_no_more():
    """Automatic dynamic shapes: the first length compiles the op (static), the second the
    op again (symbolic), and the later lengths, every one a new chunk count, compile
    nothing; the loop is never compiled."""
    assert [liger_chunks(n) for n in LENGTHS] == [6, 7, 5, 8, 6, 7]
    with liger_mimic() as liger, many_recompiles():
        step = torch.compile(training_step(liger))
        after = []
        for rows in LENGTHS:
            step_matches_float64(step, inputs(rows))
            after.append(graphs())
    assert after[2:] == [after[1]] * (len(LENGTHS) - 2), after
    assert events("run") == len(LENGTHS)


def test_a_fixed_length_compiles_the_loop_after_promote_after_steps():
    """A static graph starts with the op; once its length has run PROMOTE_AFTER steps and
    no symbolic graph has, Dynamo compiles it once more, with Liger's loop."""
    steps = liger_head_op.PROMOTE_AFTER + 3
    with liger_mimic() as liger:
        step = torch.compile(training_step(liger))
        after = []
        for _ in range(steps):
            step_matches_float64(step, inputs(40))
            after.append(graphs())
    promoted_at = liger_head_op.PROMOTE_AFTER
    assert after[:promoted_at] == [after[0]] * promoted_at, after
    assert after[promoted_at:] == [after[promoted_at]] * (steps - promoted_at), after
    assert after[promoted_at] > after[0]
    assert events("run") == liger_head_op.PROMOTE_AFTER
    assert events("promoted") == 1


def test_a_run_whose_lengths_changed_never_compiles_the_loop():
    """The first length comes back for many steps after a symbolic graph ran the head: its
    static graph keeps the op."""
    with liger_mimic() as liger, many_recompiles():
        step = torch.compile(training_step(liger))
        for rows in (40, 48) + (40,) * (liger_head_op.PROMOTE_AFTER + 2):
            step(*inputs(rows))
        first = graphs()
        step(*inputs(40))
        assert graphs() == first
    assert events("promoted") == 0
    assert events("run") == liger_head_op.PROMOTE_AFTER + 5


def test_static_graphs_of_several_lengths_never_compile_the_loop():
    """``dynamic=False`` with changing lengths: one static graph per length, none promoted
    (a run of changing lengths would compile each one's loop)."""
    with liger_mimic() as liger, many_recompiles():
        step = torch.compile(training_step(liger), dynamic=False)
        for _ in range(liger_head_op.PROMOTE_AFTER + 1):
            for rows in (40, 48):
                step(*inputs(rows))
    assert events("promoted") == 0


def _no_recompiles():
    return torch._dynamo.config.patch(error_on_recompile=True)


def _fail_on_recompile_stance():
    return torch.compiler.set_stance("fail_on_recompile")


@pytest.mark.parametrize("forbidding", [_no_recompiles, _fail_on_recompile_stance], ids=["error_on_recompile", "stance"])
def test_nothing_is_promoted_where_a_recompile_would_raise(forbidding):
    with liger_mimic() as liger:
        step = torch.compile(scaled_head(liger))
        step(*inputs(40)[:3])  # compiled before the recompiles are forbidden
        with forbidding():
            for _ in range(liger_head_op.PROMOTE_AFTER + 1):
                step(*inputs(40)[:3])
    assert events("promoted") == 0
    assert events("run") == liger_head_op.PROMOTE_AFTER + 2
    assert events("run") == liger_head_op.PROMOTE_AFTER + 2


@pytest.mark.slow
def test_the_loop_setting_compiles_the_loop_again_at_every_new_chunk_count(head_mode):
    head_mode("loop")
    with liger_mimic() as liger, many_recompiles():
        step = torch.compile(training_step(liger))
        after = []
        for rows in LENGTHS[:3]:
            step(*inputs(rows))
            after.append(graphs())
    assert after[0] < after[1] < after[2], after
    assert events("run") == 0


def test_a_static_length_with_a_long_loop_keeps_the_opaque_op():
    """Liger's loop of more than LOOP_MAX_CHUNKS chunks (V / H of 64: 40 chunks of one row)
    is never compiled, however long its length stays."""
    assert liger_head.liger_chunks((40, H), (1024, H)) == 40 > liger_head.LOOP_MAX_CHUNKS
    steps = liger_head_op.PROMOTE_AFTER + 2
    with liger_mimic() as liger:
        step = torch.compile(training_step(liger))
        for _ in range(steps):
            step_matches_float64(step, inputs(40, vocab=1024))
    assert events("run") == steps
    assert events("promoted") == 0


def token_scaling_steps(liger, steps: int) -> None:
    """``steps`` compiled steps of Liger with ``use_token_scaling`` at one length, each
    against eager on copies of its inputs: the op's steps bit for bit, the loop's to
    float32's error."""
    step = token_scaling_step(liger)
    compiled = torch.compile(step)
    for seed in range(steps):
        torch.manual_seed(seed)
        x, w, t, _ = inputs(40, dtype=torch.float32)
        ex, ew = clones(x, w)
        runs = events("run")
        got, want = compiled(x, w, t), step(ex, ew, t)
        exact = events("run") > runs  # this step ran the op
        for a, b in ((got, want), (x.grad, ex.grad), (w.grad, ew.grad)):
            assert torch.equal(a, b) if exact else torch.allclose(a, b, rtol=1e-5, atol=1e-7)


def test_token_scaling_keeps_the_op_at_a_fixed_length():
    """Under ``auto`` a static length with ``use_token_scaling`` keeps the op however
    long it stays (the op runs Liger's forward without host syncs, faster than the loop),
    with eager's results bit for bit."""
    steps = liger_head_op.PROMOTE_AFTER + 2
    with liger_mimic() as liger:
        token_scaling_steps(liger, steps)
    assert events("run") == steps
    assert events("promoted") == 0
    assert events("opaque:breaking_loop:use_token_scaling") >= 1


def test_token_scaling_written_otherwise_runs_as_liger_writes_it(tmp_path):
    """A Liger whose token scaling is not the block the package rewrites: the op runs
    Liger's forward as it is, with eager's results bit for bit."""
    source = (Path(__file__).parent / "liger_flce_mimic.py").read_text()
    assert "if len(valid_targets) > 0:" in source
    (tmp_path / "liger_flce_mimic.py").write_text(source.replace("if len(valid_targets) > 0:", "if valid_targets.numel() > 0:"))
    with liger_mimic(tmp_path / "liger_flce_mimic.py") as liger:
        token_scaling_steps(liger, 2)
    assert events("run") == 2
    assert events("token_scaling:as_liger_writes_it") >= 1 and events("token_scaling:sync_free") == 0


def test_the_loop_setting_traces_token_scaling_without_boolean_indexing(head_mode):
    """Liger's boolean indexing in its loop would make Dynamo run the whole loop eagerly
    ("graph break in a for loop"); traced from the rewritten forward, the loop compiles."""
    head_mode("loop")
    with liger_mimic() as liger:
        token_scaling_steps(liger, 2)
    assert events("run") == 0 and events("loop:token_scaling:sync_free") >= 1
    assert not [reason for reason in counters["graph_break"] if "nonzero" in reason or "Dynamic shape" in reason]


def test_liger_s_chunk_count_is_computed_as_liger_computes_it():
    assert [liger_head.liger_chunks((n, H), (V, H)) for n in LENGTHS] == [liger_chunks(n) for n in LENGTHS]
    assert liger_head.liger_chunks((8192, 4096), (128256, 4096)) == 32  # Llama-3-8B's head: the loop
    assert liger_head.liger_chunks((8192, 896), (151936, 896)) == 128  # Qwen2.5-0.5B's: the opaque op
    assert liger_head.liger_chunks((8192, 896), (151936, 896), chunk_mem_const=4) == 32


def test_the_opaque_setting_keeps_the_op_in_static_graphs(head_mode):
    head_mode("opaque")
    steps = liger_head_op.PROMOTE_AFTER + 2
    with liger_mimic() as liger:
        step = torch.compile(training_step(liger))
        for _ in range(steps):
            step_matches_float64(step, inputs(40))
    assert events("run") == steps
    assert events("promoted") == 0


def test_dynamic_true_takes_the_opaque_op_at_the_first_compile():
    with liger_mimic() as liger:
        step = torch.compile(training_step(liger), dynamic=True)
        for rows in LENGTHS[:3]:
            step_matches_float64(step, inputs(rows))
        assert events("run")
        first = graphs()
        step(*inputs(LENGTHS[3]))
        assert graphs() == first


def test_int_options_made_symbolic_by_dynamic_true_are_specialised_and_take_the_op():
    """``dynamic=True`` makes a frame's int arguments symbolic: where Liger's options reach
    the forward as arguments of the compiled frame (its Function's forward compiled as a
    frame of its own, after a graph break), the op still takes them, as constants."""
    with liger_mimic() as liger:
        def loss(x, w, t, ignore_index):
            return liger.flce(x, w, t, None, ignore_index=ignore_index)[0]

        compiled = torch.compile(loss, dynamic=True)
        for rows in LENGTHS[:2]:
            x, w, t, _ = inputs(rows, ignore_index=3)
            assert torch.equal(compiled(x, w, t, 3), loss(x, w, t, 3))
    assert events("run") == 2
    assert events("loop") == 0


def scaled_head(liger, scale=3):
    """A model's end: an op before Liger's head (exact, so that the head's input is
    eager's bit for bit), and a loss scaled after it (Liger's backward scales its saved
    gradients where ``grad_output``, here ``scale``, is not 1)."""

    def loss(x, w, t):
        return liger.flce(x * 2, w, t)[0] * scale

    return loss


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_liger_s_function_joins_the_model_s_graph_with_eager_s_gradients(dtype):
    """Liger's backward tests ``grad_output == 1`` on data, which breaks the graph at its
    Function; traced as the package's branch-free product, the model is one graph, and the
    weight gradient is eager's bit for bit."""
    with liger_mimic() as liger:
        loss = scaled_head(liger)
        compiled = torch.compile(loss)
        x, w, t, _ = inputs(40, dtype=dtype)
        ex, ew = clones(x, w)
        compiled(x, w, t).backward()
        loss(ex, ew, t).backward()
    assert graph_breaks() == 0
    assert graphs() == 1
    assert torch.equal(w.grad, ew.grad)
    assert torch.equal(x.grad, ex.grad)


def test_a_gradient_of_one_leaves_liger_s_saved_gradients_as_they_are():
    with liger_mimic() as liger:
        loss = scaled_head(liger, scale=1)
        x, w, t, _ = inputs(40, dtype=torch.bfloat16)
        ex, ew = clones(x, w)
        torch.compile(loss)(x, w, t).backward()
        loss(ex, ew, t).backward()
    assert graph_breaks() == 0
    assert torch.equal(w.grad, ew.grad)


def autocast_steps(loss, tensors, regions):
    """(loss, grads) of ``loss`` compiled and of eager, each run on clones of ``tensors``
    once per region of ``regions`` (True: under CPU bf16 autocast), the compiled function
    the same throughout; and eager's step outside autocast."""
    compiled = torch.compile(loss)

    def run(fn, region):
        x, w, t = clones(*tensors[:2]) + [tensors[2]]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=region):
            out = fn(x, w, t)
            out.backward()
        return out.detach(), [x.grad, w.grad]

    return [(run(compiled, r), run(loss, r)) for r in regions], run(loss, False)


def assert_equal_steps(got, want):
    assert torch.equal(got[0], want[0])
    assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(got[1], want[1]))


def test_under_autocast_the_op_runs_liger_s_forward_in_the_caller_s_region():
    """Compiled code runs its ops with autocast off (AOTAutograd applied it while it traced
    them); the op's kernel, Liger's forward, runs in the autocast region its call was traced
    in, as Liger's Function runs it in eager: bf16 products of fp32 tensors, eager's loss
    and gradients bit for bit."""
    with liger_mimic() as liger:
        [(got, want)], outside = autocast_steps(scaled_head(liger), inputs(40, dtype=torch.float32)[:3], [True])
    assert events("run") == 1
    assert not torch.equal(want[1][1], outside[1][1])  # the region changed eager's products
    assert_equal_steps(got, want)


def test_a_graph_traced_outside_autocast_is_not_run_inside_it():
    with liger_mimic() as liger:
        runs, _ = autocast_steps(scaled_head(liger), inputs(40, dtype=torch.float32)[:3], [False, True])
    for got, want in runs:
        assert_equal_steps(got, want)


def rounded_then_scaled(accumulator, grad_output):
    """A compiled Liger loop's end (``accumulator.to(weight.dtype)``), then the backward's
    product of that gradient."""
    liger_head_op.scaled_gradient_op()
    return liger_head_op.scaled_gradients(grad_output, None, accumulator.to(torch.bfloat16), None)[1]


def test_the_backward_reads_the_rounded_gradient_with_no_cast_of_a_cast():
    """A ``.to(float32)`` of the rounded gradient in the backward would make a cast of a
    cast in the joint graph, which Inductor's ``pointless_convert`` folds into one cast on
    torch 2.8-2.12: the backward would read the float32 accumulator itself."""
    from torch.fx.experimental.proxy_tensor import make_fx

    casts = (torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default)
    graph = make_fx(rounded_then_scaled)(torch.randn(V, H), torch.tensor(1 / 3)).graph
    assert [n for n in graph.nodes if n.target in casts and getattr(n.args[0], "target", None) in casts] == []


def test_the_backward_writes_its_products_into_the_saved_gradients():
    """No second weight-sized gradient: Inductor reuses the saved gradients' buffers."""
    from torch._inductor.utils import run_and_get_code

    with liger_mimic() as liger:
        loss = torch.compile(scaled_head(liger))
        x, w, t, _ = inputs(40)
        _, code = run_and_get_code(lambda: loss(x, w, t).backward())
    backward = code[-1]
    assert f"({V}, {H})" in backward  # the weight gradient's size is in the backward graph
    assert not any(f"empty_strided_cpu(({V}, {H})" in line for line in backward.splitlines()), backward


def backward_code_with_eager_s_gradients(scale: float = 3.0) -> str:
    """The compiled backward's code of :func:`scaled_head` (bf16, compiled afresh), after
    checking that its gradients are eager's bit for bit."""
    from torch._inductor.utils import run_and_get_code

    with liger_mimic() as liger, without_graph_caches():
        loss = scaled_head(liger, scale=scale)
        x, w, t, _ = inputs(40, dtype=torch.bfloat16)
        ex, ew = clones(x, w)
        _, code = run_and_get_code(lambda: torch.compile(loss)(x, w, t).backward())
        loss(ex, ew, t).backward()
    assert torch.equal(w.grad, ew.grad) and torch.equal(x.grad, ex.grad)
    return code[-1]


@pytest.mark.parametrize("scale", [3.0, 1.0])
def test_a_donated_saved_gradient_is_scaled_by_the_in_place_op(scale):
    """The gradients Liger's forward saved, which AOTAutograd donates to the backward and
    nothing else reads there, are scaled by ``scale_gradient_`` in their own buffers and
    returned (on CUDA its kernel reads and writes nothing at 1.0): eager's gradients bit
    for bit, at 3 and at 1."""
    from torch._inductor import ir

    if getattr(ir, "DonatedBuffer", None) is None:
        pytest.skip("this torch donates no saved tensor to Inductor's backward")
    backward = backward_code_with_eager_s_gradients(scale)
    assert "inductor_addmm_fix.scale_gradient_.default(" in backward, backward
    assert events("scale:in_place") == 2 and events("scale:pointwise") == 0  # the input's and the weight's


def test_under_cuda_graphs_the_product_stays_pointwise():
    """A mutated input keeps Inductor from capturing a graph: where CUDA graphs are on, the
    lowering keeps the pointwise product."""
    with torch._inductor.config.patch({"triton.cudagraphs": True}):
        backward = backward_code_with_eager_s_gradients()
    assert "scale_gradient_" not in backward
    assert events("scale:pointwise") >= 1 and events("scale:in_place") == 0


def test_liger_s_backward_compiled_as_a_frame_of_its_own_scales_in_place():
    """Autograd calling Liger's backward inside a compiled region: Dynamo compiles that
    frame alone, its saved gradients are no graph's to donate, and Liger's in-place
    scaling stays (no second weight-sized gradient)."""
    from types import SimpleNamespace

    with liger_mimic() as liger:
        saved = [torch.randn(40, H), torch.randn(V, H), None]
        want = [g * 3 if g is not None else None for g in saved]
        ctx = SimpleNamespace(saved_tensors=tuple(saved))
        got = torch.compile(liger.LigerFusedLinearCrossEntropyFunction.backward)(ctx, torch.tensor(3.0))
    assert torch.equal(saved[1], want[1]) and torch.equal(got[1], want[1])  # scaled in place
    assert events("backward") == 0


def test_the_loop_setting_leaves_liger_s_backward_as_dynamo_traces_it(head_mode):
    head_mode("loop")
    with liger_mimic() as liger:
        step = torch.compile(scaled_head(liger))
        step(*inputs(40)[:3]).backward()
    assert graph_breaks() > 0
    assert events("backward") == 0


OPTIONS = {
    "mean": {},
    "sum": dict(reduction="sum"),
    "none": dict(reduction="none", input_grad=False, weight_grad=False),  # the mimic's backward takes a scalar
    "bias": dict(bias=True),
    "accum-fp32": dict(accum_dtype=torch.float32),
    "z-loss": dict(lse_square_scale=1e-3, return_z_loss=True),
    "label-smoothing": dict(label_smoothing=0.1),
    "accuracy-and-predictions": dict(return_token_accuracy=True, return_predicted_tokens=True),
    "ignore-index": dict(ignore_index=3),
    "weight-frozen": dict(weight_grad=False),
    "input-without-grad": dict(input_grad=False),
}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_every_option_gives_eager_s_outputs_and_gradients(head_mode, options):
    """The opaque op runs Liger's own forward: outputs and gradients are eager's, bit for
    bit, whatever the options; absent outputs stay None."""
    head_mode("opaque")
    options = dict(options)
    shape = {k: options.pop(k) for k in ("bias", "weight_grad", "input_grad") if k in options}
    shape["ignore_index"] = options.get("ignore_index", -100)

    def run(module, x, w, t, b):
        outputs = module.flce(x, w, t, b, **options)
        if outputs[0].requires_grad:
            outputs[0].backward()
        return [None if o is None else o.detach() for o in outputs]

    with liger_mimic() as liger:
        tensors = inputs(40, dtype=torch.float32, **shape)
        eager_tensors = clones(*tensors)
        got = torch.compile(run)(liger, *tensors)
        want = run(liger, *eager_tensors)
    assert events("run")
    assert [o is None for o in got] == [o is None for o in want]
    for a, b in zip(got, want):
        if b is not None:
            assert a.dtype == b.dtype and torch.equal(a, b)
    for a, b in zip(tensors, eager_tensors):
        if b is not None:
            assert (a.grad is None) == (b.grad is None)
            if b.grad is not None:
                assert torch.equal(a.grad, b.grad)


def test_a_liger_forward_the_package_does_not_recognise_is_traced_with_one_warning(tmp_path, head_mode, monkeypatch):
    head_mode("opaque")
    monkeypatch.setattr(liger_head, "_warned", set())
    monkeypatch.setattr(warn, "_warned", set())
    source = tmp_path / "liger_flce_mimic.py"
    original = (Path(__file__).parent / "liger_flce_mimic.py").read_text()
    changed = original.replace(liger_head.RETURNS, "result = " + liger_head.RETURNS.removeprefix("return ") + "\n    return result")
    assert changed != original
    source.write_text(changed)
    with liger_mimic(str(source)) as liger, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = torch.compile(training_step(liger))
        step_matches_float64(step, inputs(40))
    said = [str(w.message) for w in caught if "not one this package recognises" in str(w.message)]
    assert len(said) == 1 and "seven values" in said[0], said
    assert events("run") == 0


def test_eager_calls_run_liger_s_own_function():
    with liger_mimic() as liger:
        forward = liger.fused_linear_cross_entropy_forward
        tensors = inputs(40)
        liger.flce(*tensors)
        assert liger.fused_linear_cross_entropy_forward is forward
    assert events("") == 0


def test_a_value_of_the_setting_that_is_not_a_mode_warns_once_and_means_auto(monkeypatch):
    monkeypatch.setattr(settings.LIGER_HEAD, "_warned", set())
    environ = {liger_head.VARIABLE: "fast"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert liger_head.mode(environ) == "auto"
        assert liger_head.mode(environ) == "auto"
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "auto, loop, opaque" in said[0]
    assert [liger_head.mode({liger_head.VARIABLE: m.upper()}) for m in liger_head.MODES] == list(liger_head.MODES)


def test_the_status_shows_the_setting(head_mode):
    assert installer.settings().get("liger_head") is None
    head_mode("loop")
    assert installer.settings()["liger_head"] == f"{liger_head.VARIABLE}=loop"
