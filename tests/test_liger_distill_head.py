"""Liger's fused linear JSD and KL-div under ``torch.compile``: under ``auto`` and
``opaque`` their forward is one opaque op (Liger's own function) and their backward the
package's branch-free product, so their autograd Function joins the model's graph with
eager's results and one graph serves every length (``dynamo/liger_distill_head.py``);
under ``loop`` they are traced as Dynamo traces them.  On the CPU, with
``tests/liger_distill_mimic.py`` standing for Liger's modules."""

from __future__ import annotations

import functools
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

from helpers import graph_breaks, liger_dispatch_mimic, liger_distill_mimic, liger_mimic, many_recompiles
from inductor_addmm_fix.dynamo import liger_dispatch, liger_distill_head, liger_head, liger_head_op
from inductor_addmm_fix.patching import warn
from inductor_addmm_fix.patching.counters import COUNTER

H, TEACHER_H, V = 16, 24, 128  # chunks of next_power_of_2(cdiv(BT, 8)) rows
LOSSES = ("jsd", "kl_div")
#: token counts giving Liger 6, 7, 5, 8 and 6 chunks
LENGTHS = (41, 49, 17, 57, 21)


@pytest.fixture(autouse=True)
def fresh_counters():
    counters.clear()
    liger_head_op.reset_tiers()
    yield


def events(name: str) -> int:
    return counters[COUNTER].get(f"liger_head:{name}", 0)


def inputs(loss: str, rows: int, *, dtype=torch.float32, labels=False, weight_grad=True, seed=0, hidden=H, vocab=V):
    """The tensors of a call of ``loss``'s Function before its options: the student's
    input and weight, then the teacher's input and weight (JSD) or the target
    distribution (KL-div), then the labels."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, hidden, generator=generator, dtype=dtype).requires_grad_()
    w = (torch.randn(vocab, hidden, generator=generator, dtype=dtype) * 0.3).requires_grad_(weight_grad)
    if loss == "jsd":
        other = [torch.randn(rows, TEACHER_H, generator=generator, dtype=dtype),
                 torch.randn(vocab, TEACHER_H, generator=generator, dtype=dtype) * 0.3]  # fmt: skip
    else:
        other = [torch.softmax(torch.randn(rows, vocab, generator=generator), -1).to(dtype)]
    shift_labels = None
    if labels:
        shift_labels = torch.randint(0, V, (rows,), generator=generator)
        shift_labels[::5] = -100
    return [x, w, *other, shift_labels]


def clones(tensors):
    return [t if t is None or not t.requires_grad and t.grad_fn is None and not t.is_leaf else
            t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]  # fmt: skip


def head(modules, loss: str, scale: float = 3.0, **options):
    """A model's end: an exact op before Liger's Function, the loss scaled after it
    (Liger's backward scales its saved gradients where ``grad_output`` is not 1)."""
    jsd, kl_div = modules

    def run(x, w, *rest):
        if loss == "jsd":
            tx, tw, labels = rest
            out = jsd.LigerFusedLinearJSDFunction.apply(
                x * 2, w, tx, tw, labels, options.get("jsd_beta", 0.5), -100, options.get("temperature", 1.0),
                options.get("accum_dtype"),
            )  # fmt: skip
        else:
            target, labels = rest
            out = kl_div.LigerFusedLinearKLDIVFunction.apply(
                x * 2, w, target, labels, options.get("reduction", "batchmean"), -100,
                options.get("temperature", 1.0), 1e-10, options.get("accum_dtype"),
            )  # fmt: skip
        return out * scale

    return run


def step(fn, tensors):
    loss = fn(*tensors)
    loss.backward()
    return loss.detach(), [t.grad for t in tensors[:2]]


def assert_same(got, want):
    (loss, grads), (want_loss, want_grads) = got, want
    assert loss.dtype == want_loss.dtype == torch.float32
    assert torch.equal(loss, want_loss)
    for a, b in zip(grads, want_grads):
        assert (a is None) == (b is None)
        if b is not None:
            assert a.dtype == b.dtype and torch.equal(a, b)


def reference(loss: str, tensors, scale: float = 3.0, temperature: float = 1.0, jsd_beta: float = 0.5):
    """The loss of the whole logits in float64, and its gradients by autograd."""
    x, w = (t.detach().double().requires_grad_(t.requires_grad) for t in tensors[:2])
    labels = tensors[-1]
    keep = torch.ones(x.shape[0], dtype=torch.bool) if labels is None else labels != -100
    log_q = torch.log_softmax((x * 2) @ w.t() / temperature, -1)
    if loss == "jsd":
        tx, tw = (t.double() for t in tensors[2:4])
        log_p = torch.log_softmax(tx @ tw.t() / temperature, -1)
        p, q = log_p.exp(), log_q.exp()
        log_m = (jsd_beta * p + (1 - jsd_beta) * q).log()
        rows = (jsd_beta * p * (log_p - log_m) + (1 - jsd_beta) * q * (log_q - log_m)).sum(-1)
    else:
        t = tensors[2].double()
        rows = (t * (t.clamp_min(1e-10).log() - log_q)).sum(-1)
    value = (rows * keep).sum() / keep.sum() * scale
    value.backward()
    return value.detach(), [x.grad, w.grad]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("loss", LOSSES)
def test_the_function_joins_the_model_s_graph_with_eager_s_results(loss, dtype):
    """One graph, no break (Liger's chunk kernel behind its ``dispatch()`` and its backward's
    test on data included), the op run, and eager's loss and gradients bit for bit."""
    with liger_distill_mimic() as modules:
        fn = head(modules, loss)
        tensors = inputs(loss, 40, dtype=dtype, labels=True)
        got = step(torch.compile(fn), tensors)
        want = step(fn, clones(tensors))
    assert graph_breaks() == 0
    assert counters["stats"]["unique_graphs"] == 1
    assert events(f"{loss}:run") == 1  # (the events counted while tracing: torch 2.8 may drop them)
    assert_same(got, want)


def step_in_region(fn, tensors, region: bool):
    """:func:`step` on clones of ``tensors``, under CPU bf16 autocast where ``region``."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=region):
        return step(fn, clones(tensors))


@pytest.mark.parametrize("loss", LOSSES)
def test_under_autocast_the_op_runs_liger_s_forward_in_the_caller_s_region(loss):
    """Compiled code runs its ops with autocast off; the op's kernel, Liger's forward, runs
    in the autocast region its call was traced in, as Liger's Function runs it in eager
    (bf16 products of fp32 tensors): eager's results bit for bit."""
    with liger_distill_mimic() as modules:
        fn = head(modules, loss)
        tensors = inputs(loss, 40, labels=True)
        got = step_in_region(torch.compile(fn), tensors, True)
        want, outside = step_in_region(fn, tensors, True), step_in_region(fn, tensors, False)
    assert events(f"{loss}:run") == 1
    assert not torch.equal(want[1][1], outside[1][1])  # the region changed eager's products
    assert_same(got, want)


@pytest.mark.parametrize("loss", LOSSES)
def test_a_graph_traced_outside_autocast_is_not_run_inside_it(loss):
    with liger_distill_mimic() as modules:
        fn = head(modules, loss)
        compiled, tensors = torch.compile(fn), inputs(loss, 40, labels=True)
        for region in (False, True):
            assert_same(step_in_region(compiled, tensors, region), step_in_region(fn, tensors, region))


@pytest.mark.parametrize("loss", LOSSES)
def test_a_gradient_of_one_leaves_the_saved_gradients_as_they_are(loss):
    with liger_distill_mimic() as modules:
        fn = head(modules, loss, scale=1.0)
        tensors = inputs(loss, 40, dtype=torch.bfloat16)
        got = step(torch.compile(fn), tensors)
        want = step(fn, clones(tensors))
    assert graph_breaks() == 0
    assert_same(got, want)


@pytest.mark.parametrize("loss", LOSSES)
def test_changing_lengths_compile_two_graphs_and_no_more(loss):
    """Automatic dynamic shapes: the first length compiles a static graph, the second a
    symbolic one, which every later length, of every chunk count, runs; each result is
    float64's within float32's error."""
    with liger_distill_mimic() as modules, many_recompiles():
        fn = torch.compile(head(modules, loss))
        after = []
        for seed, rows in enumerate(LENGTHS):
            tensors = inputs(loss, rows, labels=True, seed=seed)
            got_loss, got_grads = step(fn, tensors)
            want_loss, want_grads = reference(loss, tensors)
            torch.testing.assert_close(got_loss.double(), want_loss, rtol=1e-5, atol=1e-6)
            for a, b in zip(got_grads, want_grads):
                torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-6)
            after.append(counters["stats"]["unique_graphs"])
    assert after == [1] + [2] * (len(LENGTHS) - 1), after
    assert events(f"{loss}:run") == len(LENGTHS)


def matches_float64(loss: str, got, tensors) -> None:
    got_loss, got_grads = got
    want_loss, want_grads = reference(loss, tensors)
    torch.testing.assert_close(got_loss.double(), want_loss, rtol=1e-5, atol=1e-6)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("loss", LOSSES)
def test_a_fixed_length_compiles_the_loop_after_promote_after_steps(loss):
    """A static graph of a loop of 4 to 32 chunks starts with the op; once its length has
    run PROMOTE_AFTER steps, Dynamo compiles it once more with Liger's chunk loop (its
    ``dispatch()`` traced), in one graph, float64's results within float32's error."""
    steps = liger_head_op.PROMOTE_AFTER + 3
    assert liger_distill_head.chunk_count(liger_distill_head.FORWARDS[f"fused_linear_{loss}_forward"], 40, H, V, "cpu") == 5
    with liger_distill_mimic() as modules:
        fn = torch.compile(head(modules, loss))
        after = []
        for seed in range(steps):
            tensors = inputs(loss, 40, seed=seed)
            matches_float64(loss, step(fn, tensors), tensors)
            after.append(counters["stats"]["unique_graphs"])
    promoted_at = liger_head_op.PROMOTE_AFTER
    assert after == [1] * promoted_at + [2] * (steps - promoted_at), after
    assert events(f"{loss}:run") == liger_head_op.PROMOTE_AFTER
    assert events("promoted") == 1 and events(f"{loss}:loop:promoted") >= 1
    assert events("dispatch:traced") > 0 and graph_breaks() == 0


def test_a_run_whose_lengths_changed_never_compiles_the_loop():
    """The first length comes back for many steps after a symbolic graph ran the op: its
    static graph keeps the op (the tiers are FLCE's: ``liger_head_op``)."""
    with liger_distill_mimic() as modules, many_recompiles():
        fn = torch.compile(head(modules, "jsd"))
        for seed, rows in enumerate((40, 48) + (40,) * (liger_head_op.PROMOTE_AFTER + 2)):
            step(fn, inputs("jsd", rows, seed=seed))
    assert events("promoted") == 0 and events("jsd:loop:promoted") == 0
    assert events("jsd:run") == liger_head_op.PROMOTE_AFTER + 4
    assert counters["stats"]["unique_graphs"] == 2


@pytest.mark.parametrize("loss", LOSSES)
def test_a_loop_dispatch_does_not_trace_keeps_the_op_at_a_fixed_length(loss):
    """Where Liger's dispatch resolves an implementation Dynamo would break at (an
    autograd Function: cuTile's, a backend of its own), a fixed length keeps the op."""
    with liger_distill_mimic() as modules:
        registry = sys.modules[liger_dispatch.MODULE].REGISTRY
        kernel = liger_distill_head.FORWARDS[f"fused_linear_{loss}_forward"].kernel
        registry[kernel].autograd_function = object()
        fn = torch.compile(head(modules, loss))
        for seed in range(liger_head_op.PROMOTE_AFTER + 2):
            tensors = inputs(loss, 40, seed=seed)
            assert_same(step(fn, tensors), step(head(modules, loss), clones(tensors)))
    assert events("promoted") == 0 and events(f"{loss}:run") == liger_head_op.PROMOTE_AFTER + 2
    assert counters["stats"]["unique_graphs"] == 1 and graph_breaks() == 0


@pytest.mark.parametrize("loss", LOSSES)
def test_labels_keep_the_op_at_a_fixed_length(loss):
    """With labels Liger reads their count with ``.item()``, a graph break at its
    Function: the op stays, one graph, eager's results."""
    with liger_distill_mimic() as modules:
        fn = torch.compile(head(modules, loss))
        for seed in range(liger_head_op.PROMOTE_AFTER + 2):
            tensors = inputs(loss, 40, labels=True, seed=seed)
            assert_same(step(fn, tensors), step(head(modules, loss), clones(tensors)))
    assert events("promoted") == 0 and events(f"{loss}:run") == liger_head_op.PROMOTE_AFTER + 2
    assert counters["stats"]["unique_graphs"] == 1 and graph_breaks() == 0


@pytest.mark.parametrize("hidden, vocab", [(H, V), (32, 256)], ids=["small-hidden", "chunk-gradients-under-twice-the-weight-s"])
@pytest.mark.parametrize("loss", LOSSES)
def test_the_promoted_loop_accumulates_in_the_forward_and_its_backward_only_scales(loss, hidden, vocab):
    """An fp32 accumulator's loop is promoted after PROMOTE_AFTER runs of the op.
    Liger's loop rounds that accumulator to the weight's dtype; the backward scales
    that rounded gradient and runs no matmul.  The partitioner saves the rounded gradients
    where its chunks' gradients weigh more than they do, also where they weigh less than
    twice as much (H 32, V 256, 40 rows): it weighs a tensor that only fusible ops read
    at twice its size, and the backward's product is an op it does not fuse.  (Saving
    every chunk's gradient and accumulating in the backward, JSD's promoted loop held
    2.3 GiB more than eager on an H100.)"""
    from torch._inductor.utils import run_and_get_code

    def draw(seed):
        return inputs(loss, 40, dtype=torch.bfloat16, seed=seed, hidden=hidden, vocab=vocab)

    with liger_distill_mimic() as modules:
        fn = torch.compile(head(modules, loss, accum_dtype=torch.float32))
        for seed in range(liger_head_op.PROMOTE_AFTER):
            step(fn, draw(seed))
        _, (forward, backward) = run_and_get_code(lambda: step(fn, draw(99)))
    assert events("promoted") == 1 and events(f"{loss}:loop:promoted") >= 1  # the control: this step compiled the loop
    assert events(f"{loss}:run") == liger_head_op.PROMOTE_AFTER
    spec = liger_distill_head.FORWARDS[f"fused_linear_{loss}_forward"]
    chunks = liger_distill_head.chunk_count(spec, 40, hidden, vocab, "cpu")
    assert forward.count("extern_kernels.mm(") >= 2 * chunks  # each chunk's logits and its accumulation
    assert not any(f"{call}(" in backward for call in ("extern_kernels.mm", "extern_kernels.addmm", "aten.addmm")), backward


@pytest.mark.parametrize("loss", LOSSES)
def test_a_loop_of_fewer_than_four_chunks_keeps_the_op_at_a_fixed_length(loss):
    """3 chunks (KL-div's 2-chunk loop compiled ran slower than eager's on an H100)."""
    spec = liger_distill_head.FORWARDS[f"fused_linear_{loss}_forward"]
    assert liger_distill_head.chunk_count(spec, 3, H, V, "cpu") == 3
    with liger_distill_mimic() as modules:
        fn = torch.compile(head(modules, loss))
        for seed in range(liger_head_op.PROMOTE_AFTER + 2):
            step(fn, inputs(loss, 3, seed=seed))
    assert events("promoted") == 0 and events(f"{loss}:run") == liger_head_op.PROMOTE_AFTER + 2
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("loss", LOSSES)
def test_dynamic_true_takes_the_op_at_the_first_compile(loss):
    """``dynamic=True`` makes the Function's int and float options symbolic: they are
    specialised, and the op is taken."""
    with liger_distill_mimic() as modules:
        fn = head(modules, loss, temperature=2.0)
        tensors = inputs(loss, 40, labels=True)
        got = step(torch.compile(fn, dynamic=True), tensors)
        want = step(fn, clones(tensors))
    assert events(f"{loss}:run") == 1 and graph_breaks() == 0
    assert_same(got, want)


OPTIONS = {
    "jsd": {
        "beta-0": dict(jsd_beta=0.0),
        "beta-1": dict(jsd_beta=1.0),
        "beta-0.25-temperature-2": dict(jsd_beta=0.25, temperature=2.0),
        "labels": dict(labels=True),
        "accum-fp32": dict(accum_dtype=torch.float32, dtype=torch.bfloat16),
        "weight-frozen": dict(weight_grad=False),
    },
    "kl_div": {
        "sum": dict(reduction="sum"),
        "mean": dict(reduction="mean"),
        "temperature-2": dict(temperature=2.0),
        "labels": dict(labels=True),
        "accum-fp32": dict(accum_dtype=torch.float32, dtype=torch.bfloat16),
        "weight-frozen": dict(weight_grad=False),
    },
}
CASES = [(loss, options) for loss in LOSSES for options in OPTIONS[loss].values()]
IDS = [f"{loss}-{name}" for loss in LOSSES for name in OPTIONS[loss]]


@pytest.mark.parametrize("loss, options", CASES, ids=IDS)
def test_every_option_gives_eager_s_results(head_mode, loss, options):
    head_mode("opaque")
    options = dict(options)
    shape = {k: options.pop(k) for k in ("dtype", "labels", "weight_grad") if k in options}
    with liger_distill_mimic() as modules:
        fn = head(modules, loss, **options)
        tensors = inputs(loss, 40, **shape)
        got = step(torch.compile(fn), tensors)
        want = step(fn, clones(tensors))
    assert events(f"{loss}:run") == 1
    assert_same(got, want)


@pytest.mark.parametrize("loss", LOSSES)
def test_the_loop_setting_leaves_the_function_as_dynamo_traces_it(head_mode, loss):
    """Under ``loop`` neither the op nor the branch-free backward: Liger's backward, which
    tests its gradient on data, breaks the graph."""
    head_mode("loop")
    with liger_distill_mimic() as modules:
        fn = head(modules, loss)
        tensors = inputs(loss, 40)
        got = step(torch.compile(fn), tensors)
        want = step(fn, clones(tensors))
    assert events(f"{loss}:opaque") == 0 and events("distill:backward") == 0
    assert graph_breaks() > 0
    torch.testing.assert_close(got[0], want[0])


@pytest.mark.parametrize("loss", LOSSES)
def test_a_forward_the_package_does_not_recognise_is_traced_with_one_warning(tmp_path, monkeypatch, loss):
    monkeypatch.setattr(liger_head, "_warned", set())
    monkeypatch.setattr(warn, "_warned", set())
    spec = next(f for f in liger_distill_head.FORWARDS.values() if f.loss == loss)
    original = (Path(__file__).parent / "liger_distill_mimic.py").read_text()
    start = original.index(f"def {spec.function}(")
    end = original.index("):", start)
    changed = original[:end] + "    unknown_option=None,\n" + original[end:]
    assert changed != original
    (tmp_path / "changed.py").write_text(changed)
    with liger_dispatch_mimic(), liger_mimic(str(tmp_path / "changed.py"), spec.module) as module, \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        modules = (module, module)
        fn = head(modules, loss)
        tensors = inputs(loss, 40)
        got = step(torch.compile(fn), tensors)
        want = step(fn, clones(tensors))
    said = [str(w.message) for w in caught if "not one this package recognises" in str(w.message)]
    assert len(said) == 1 and "unknown_option" in said[0], said
    assert events(f"{loss}:run") == 0
    torch.testing.assert_close(got[0], want[0])


def test_the_op_says_so_where_liger_returns_another_shape(monkeypatch):
    """Liger's forward run by the op returns what the graph was traced for, or the op
    raises with the setting that avoids it."""
    with liger_distill_mimic() as (jsd, _):
        fn = head((jsd, None), "jsd")
        tensors = inputs("jsd", 40)
        compiled = torch.compile(fn)
        step(compiled, tensors)
        real = jsd.fused_linear_jsd_forward

        @functools.wraps(real)
        def loss_of_another_shape(*args, **kwargs):
            loss, *rest = real(*args, **kwargs)
            return (loss.reshape(1), *rest)

        monkeypatch.setattr(jsd, "fused_linear_jsd_forward", loss_of_another_shape)
        with pytest.raises(RuntimeError, match="INDUCTOR_ADDMM_FIX_LIGER_HEAD=loop"):
            step(compiled, inputs("jsd", 40, seed=1))
