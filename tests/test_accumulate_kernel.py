"""In-place accumulates on a Hopper GPU go to the package's kernel where it applies: which
calls it takes, how Inductor's lowering routes a chain's steps to it (in place, no
copies, results as float64's), that every other step keeps reinplace's lowering, and,
where Triton is installed, the kernel's arithmetic (Triton's interpreter) and its
Hopper build (wgmma, no spills).  The CPU has no Hopper GPU: the routing tests say it
has one, and the op runs its CPU path; the kernel on the GPU is tests/gpu/."""

import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import inductor_addmm_fix
from helpers import allocations, compile_and_run
from workloads import accumulate_in_chunks, accumulate_separate_chunks

from inductor_addmm_fix.inductor import accumulate_kernel, hopper_accumulate
from inductor_addmm_fix.inductor.reinplace import fallback_kernel_runs_out_variants

# One step per chunk: accumulate_pairs (test_accumulate_pairs.py) off.
pytestmark = pytest.mark.features("-accumulate_pairs")

V, H, BT, CHUNK = 48, 40, 64, 16


def has_triton() -> bool:
    return hopper_accumulate.triton_supported() is None


@pytest.fixture
def feature_on(monkeypatch):
    """The feature applied on this machine, Triton or not: what it needs of Triton is
    said to be there (nothing here launches the kernel); planned again afterwards."""
    import torch._inductor.compile_fx  # noqa: F401  (the stage the feature applies at)

    monkeypatch.setattr(hopper_accumulate, "triton_supported", lambda: None)
    inductor_addmm_fix.install("-accumulate_pairs")
    assert inductor_addmm_fix.status().features["accumulate_kernel"] == "applied"
    yield
    inductor_addmm_fix.install("-accumulate_pairs,-accumulate_kernel")
    monkeypatch.undo()
    inductor_addmm_fix.install("-accumulate_pairs")


@pytest.fixture
def hopper_sizes(monkeypatch, feature_on):
    """The lowering takes this CPU for a Hopper GPU, sizes as the kernel takes them; at
    run time the op sees the CPU as it is (the kernel's fallback runs)."""
    monkeypatch.setattr(accumulate_kernel, "on_hopper", lambda device: True)


@pytest.fixture
def on_hopper(monkeypatch, hopper_sizes):
    """The lowering takes this CPU for a Hopper GPU, and the tests' small accumulators
    for ones the kernel takes."""
    monkeypatch.setattr(accumulate_kernel, "sizes_supported", lambda *sizes: True)


def operands(dtype=torch.bfloat16):
    return torch.randn(BT, V, dtype=dtype), torch.randn(BT, H, dtype=dtype)


def relative_error(got, start, g, x) -> float:
    want = start.double() + g.double().t() @ x.double()
    return ((got.double() - want).norm() / want.norm()).item()


# ---------------------------------------------------------------- which calls it takes
def flce_step(m=4096, n=16384, k=128, c_dtype=torch.float32, dtype=torch.bfloat16):
    """(C, A, B) of one FLCE step, shaped as Liger passes them: A = g.t()."""
    g = torch.empty(k, m, dtype=dtype)
    return torch.empty(m, n, dtype=c_dtype), g.t(), torch.empty(k, n, dtype=dtype)


@pytest.fixture
def hopper_device(monkeypatch):
    monkeypatch.setattr(hopper_accumulate, "on_hopper", lambda device: True)


def test_it_takes_liger_s_step_into_an_fp32_or_bf16_accumulator(hopper_device):
    assert hopper_accumulate.supports(*flce_step(c_dtype=torch.float32))
    assert hopper_accumulate.supports(*flce_step(c_dtype=torch.bfloat16))
    assert hopper_accumulate.supports(*flce_step(c_dtype=torch.float16, dtype=torch.float16))


def test_it_leaves_other_gpus_to_cublas(monkeypatch):
    monkeypatch.setattr(hopper_accumulate, "on_hopper", lambda device: False)
    assert not hopper_accumulate.supports(*flce_step())


@pytest.mark.parametrize("k, c_dtype, takes", [(512, torch.float32, True), (513, torch.float32, False),
                                               (128, torch.bfloat16, True), (129, torch.bfloat16, False)])
def test_it_takes_the_rows_per_step_where_it_measured_faster(hopper_device, k, c_dtype, takes):
    assert hopper_accumulate.supports(*flce_step(k=k, c_dtype=c_dtype)) is takes


@pytest.mark.parametrize("k, takes", [(256, True), (257, False)])
def test_it_takes_more_rows_into_a_large_bf16_accumulator(hopper_device, k, takes):
    """2**28 elements (Llama-3's and Gemma-2's heads have 2**29): 256 rows, not 128."""
    assert hopper_accumulate.supports(*flce_step(m=1 << 14, n=1 << 14, k=k, c_dtype=torch.bfloat16)) is takes


def test_it_leaves_small_accumulators_to_cublas(hopper_device):
    assert not hopper_accumulate.supports(*flce_step(m=1024, n=1024))


def test_it_leaves_other_layouts_to_cublas(hopper_device):
    c, a, b = flce_step()
    assert not hopper_accumulate.supports(c, a.contiguous(), b)  # A row-major
    assert not hopper_accumulate.supports(c, a, b.t().contiguous().t())  # B column-major
    assert not hopper_accumulate.supports(c.t().contiguous().t(), a, b)  # C column-major
    odd = torch.empty(256, 4097, dtype=torch.bfloat16)[:, 1:]
    assert not hopper_accumulate.supports(c, odd.t(), b)  # rows not 16-byte aligned


def test_it_leaves_other_dtypes_and_scalings_to_cublas(hopper_device):
    c, a, b = flce_step()
    assert not hopper_accumulate.supports(c, a.float(), b.float())
    assert not hopper_accumulate.supports(c.double(), a, b)
    assert not hopper_accumulate.supports(c, a, b.half())
    assert not hopper_accumulate.supports(c, a, b, beta=0.5)
    assert not hopper_accumulate.supports(c, a, b, alpha=2)


# ---------------------------------------------------------------- how Inductor routes
def chunks(grad_weight, g, x, **kwargs):
    return accumulate_in_chunks(grad_weight, g, x, CHUNK, **kwargs)


@pytest.mark.parametrize("out_dtype", [torch.float32, None], ids=["fp32 accumulator", "bf16 accumulator"])
def test_a_chain_on_hopper_runs_the_accumulate_op_in_place(on_hopper, out_dtype):
    if out_dtype is None and not fallback_kernel_runs_out_variants():
        pytest.skip("this torch lowers a bf16 chain through aten.addmm_, which the op replaces alike")
    g, x = operands()
    start = torch.randn(V, H, dtype=out_dtype or torch.bfloat16)
    buf = start.clone()
    kwargs = {"out_dtype": out_dtype} if out_dtype else {}
    compiled = compile_and_run(lambda b, g, x: chunks(b, g, x, **kwargs), buf, g, x)
    what = "addmm.dtype" if out_dtype else "addmm"
    assert compiled.counts.get(f"{what}:hopper_accumulate") == BT // CHUNK, compiled.counts
    assert compiled.code.count("inductor_addmm_fix.accumulate_.default(") == BT // CHUNK
    assert compiled.result is buf
    assert allocations(compiled.code, (V, H)) == 0  # no copy of the accumulator
    assert relative_error(buf, start, g, x) < (1e-6 if out_dtype else 1e-2)


def test_a_chain_too_small_for_the_kernel_keeps_reinplace_s_lowering(hopper_sizes):
    g, x = operands()
    compiled = compile_and_run(lambda b, g, x: chunks(b, g, x, out_dtype=torch.float32), torch.zeros(V, H), g, x)
    assert "addmm.dtype:hopper_accumulate" not in compiled.counts, compiled.counts
    assert compiled.counts.get("addmm.dtype:accumulate_in_place") == BT // CHUNK, compiled.counts
    assert "accumulate_" not in compiled.code


def test_a_chain_with_symbolic_sizes_leaves_the_choice_to_each_call(hopper_sizes):
    """Sizes unknown when compiling: the op decides at run time (here, too small for the
    kernel: the fallback runs, and the result is right)."""
    g, x = operands()
    start = torch.randn(V, H)
    buf = start.clone()
    compiled = compile_and_run(lambda b, g, x: chunks(b, g, x, out_dtype=torch.float32), buf, g, x, dynamic=True)
    assert compiled.counts.get("addmm.dtype:hopper_accumulate") == BT // CHUNK, compiled.counts
    assert relative_error(buf, start, g, x) < 1e-6


def test_a_chain_off_hopper_keeps_reinplace_s_lowering(feature_on):
    g, x = operands()
    compiled = compile_and_run(lambda b, g, x: chunks(b, g, x, out_dtype=torch.float32), torch.zeros(V, H), g, x)
    assert "addmm.dtype:hopper_accumulate" not in compiled.counts
    assert compiled.counts.get("addmm.dtype:accumulate_in_place") == BT // CHUNK, compiled.counts
    assert "accumulate_" not in compiled.code


def test_its_status_off_hopper_says_it_is_idle_here(feature_on, capsys):
    from inductor_addmm_fix import cli

    assert cli.main([]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("  accumulate_kernel "))
    assert re.search(r"applied \(\d+ patch(es)?\); idle: no Hopper GPU here \(CUDA capability 9\.0\)$", line), line


def test_its_status_with_a_hopper_gpu_says_only_applied(feature_on, monkeypatch):
    from inductor_addmm_fix import installer

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(hopper_accumulate, "_capability", lambda index: (8, 0) if index == 0 else (9, 0))
    assert "accumulate_kernel" not in installer.idle_here()
    monkeypatch.setattr(hopper_accumulate, "_capability", lambda index: (8, 0))
    assert installer.idle_here()["accumulate_kernel"] == "no Hopper GPU here (CUDA capability 9.0)"


def test_a_scaled_step_keeps_reinplace_s_lowering(on_hopper):
    g, x = operands()
    compiled = compile_and_run(
        lambda b, g, x: chunks(b, g, x, out_dtype=torch.float32, beta=0.5), torch.zeros(V, H), g, x
    )
    assert "addmm.dtype:hopper_accumulate" not in compiled.counts, compiled.counts
    assert "accumulate_" not in compiled.code


def test_the_op_runs_reinplace_s_call_where_the_kernel_does_not_apply(monkeypatch):
    def kernel(*args):
        raise AssertionError("the kernel ran")

    monkeypatch.setattr(hopper_accumulate, "accumulate", kernel)
    g, x = operands()
    for start in (torch.randn(V, H), torch.randn(V, H, dtype=torch.bfloat16)):
        buf = start.clone()
        accumulate_kernel.accumulate_op()(buf, g.t(), x)
        assert relative_error(buf, start, g, x) < (1e-6 if start.dtype == torch.float32 else 1e-2)


def test_a_kernel_that_fails_to_build_is_off_for_the_process_with_one_warning(monkeypatch):
    def kernel(*args):
        raise RuntimeError("simulated: this Triton cannot build it")

    monkeypatch.setattr(hopper_accumulate, "supports", lambda *args: True)
    monkeypatch.setattr(hopper_accumulate, "accumulate", kernel)
    monkeypatch.setattr(hopper_accumulate, "failure", None)
    g, x = operands()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(2):
            start = torch.randn(V, H)
            buf = start.clone()
            accumulate_kernel.accumulate_op()(buf, g.t(), x)
            assert relative_error(buf, start, g, x) < 1e-6  # the step ran on the fallback
    messages = [str(w.message) for w in record if "Hopper accumulate kernel failed" in str(w.message)]
    assert len(messages) == 1 and "simulated" in messages[0], messages
    assert hopper_accumulate.failure.startswith("RuntimeError: simulated")


def test_turning_the_feature_off_restores_reinplace_s_lowerings(feature_on):
    from torch._inductor import lowering as L

    from inductor_addmm_fix.inductor.reinplace import addmm_dtype_inplace

    ops = (addmm_dtype_inplace(), torch.ops.aten.addmm_.default)
    wrapped = [L.lowerings[op] for op in ops]
    assert all(getattr(entry, "splices", False) for entry in wrapped)
    inductor_addmm_fix.install("-accumulate_pairs,-accumulate_kernel")
    assert [L.lowerings[op] for op in ops] == [entry.stock for entry in wrapped]


def test_turning_reinplace_off_turns_the_feature_off_with_it(feature_on):
    from torch._inductor import lowering as L

    from inductor_addmm_fix.inductor.reinplace import addmm_dtype_inplace

    inductor_addmm_fix.install("-accumulate_pairs,-reinplace")
    state = inductor_addmm_fix.status().features["accumulate_kernel"]
    assert state == "off (needs the reinplace feature, which is not applied)"
    assert addmm_dtype_inplace() not in L.lowerings  # neither the wrapper nor what it wrapped


def test_turning_reinplace_on_again_brings_the_feature_back_over_it(feature_on):
    from torch._inductor import lowering as L

    from inductor_addmm_fix.inductor.reinplace import addmm_dtype_inplace

    inductor_addmm_fix.install("-accumulate_pairs,-reinplace")
    inductor_addmm_fix.install("-accumulate_pairs")
    assert inductor_addmm_fix.status().features["accumulate_kernel"] == "applied"
    assert getattr(L.lowerings[addmm_dtype_inplace()], "splices", False)


def test_reinplace_keeps_its_lowerings_when_the_feature_goes(feature_on):
    inductor_addmm_fix.install("-accumulate_pairs,-reinplace")
    inductor_addmm_fix.install("-accumulate_pairs")
    inductor_addmm_fix.install("-accumulate_pairs,-accumulate_kernel")
    g, x = operands()
    compiled = compile_and_run(lambda b, g, x: chunks(b, g, x, out_dtype=torch.float32), torch.zeros(V, H), g, x)
    assert compiled.counts.get("addmm.dtype:accumulate_in_place") == BT // CHUNK, compiled.counts


# ---------------------------------------------------------------- merged pairs
@pytest.fixture
def pairs_on_hopper(monkeypatch):
    """Every feature applied, ``accumulate_pairs`` too; the lowering and the pass take
    this CPU for a Hopper GPU and the tests' sizes for ones the kernel takes (at run time
    the ops see the CPU as it is: the fallback runs)."""
    import torch._inductor.compile_fx  # noqa: F401

    monkeypatch.setattr(hopper_accumulate, "triton_supported", lambda: None)
    inductor_addmm_fix.install()
    for name in ("on_hopper", "sizes_supported", "pair_sizes_supported"):
        monkeypatch.setattr(accumulate_kernel, name, lambda *args: True)
    yield
    monkeypatch.undo()
    inductor_addmm_fix.install("-accumulate_pairs")


def separate_chunks(n=BT // CHUNK, dtype=torch.bfloat16):
    return [torch.randn(CHUNK, V, dtype=dtype) for _ in range(n)], torch.randn(n * CHUNK, H, dtype=dtype)


def pair_error(got, start, gs, x) -> float:
    return relative_error(got, start, torch.cat(gs), x)


@pytest.mark.parametrize("out_dtype", [torch.float32, None], ids=["fp32 accumulator", "bf16 accumulator"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_chain_of_separate_chunks_on_hopper_accumulates_each_pair_in_one_step(pairs_on_hopper, out_dtype, dynamic):
    """Each chunk's gradient a tensor of its own: each pair is one ``accumulate_pair_``
    call with both chunks where they lie (no ``cat``), into the accumulator in place."""
    if out_dtype is None and not fallback_kernel_runs_out_variants():
        pytest.skip("this torch lowers a bf16 chain through aten.addmm_")
    gs, x = separate_chunks()
    start = torch.randn(V, H, dtype=out_dtype or torch.bfloat16)
    buf = start.clone()
    kwargs = {"out_dtype": out_dtype} if out_dtype else {}
    compiled = compile_and_run(lambda b, gs, x: accumulate_separate_chunks(b, gs, x, **kwargs), buf, gs, x,
                               dynamic=dynamic)
    pairs = BT // CHUNK // 2
    assert compiled.events("accumulate_pairs") == {"chains": 1, "pairs": pairs, "split": pairs}
    assert compiled.counts.get("pair:hopper_accumulate") == pairs, compiled.counts
    assert compiled.code.count("inductor_addmm_fix.accumulate_pair_.default(") == pairs
    assert "cat" not in compiled.code and "# alias" not in compiled.code
    assert compiled.result is buf
    assert pair_error(buf, start, gs, x) < (1e-6 if out_dtype else 1e-2)


def test_an_odd_chunk_after_the_pairs_stays_a_step_of_its_own(pairs_on_hopper):
    gs, x = separate_chunks(3)
    start = torch.randn(V, H)
    buf = start.clone()
    compiled = compile_and_run(lambda b, gs, x: accumulate_separate_chunks(b, gs, x, out_dtype=torch.float32),
                               buf, gs, x)
    assert compiled.counts.get("pair:hopper_accumulate") == 1 and compiled.counts.get("addmm.dtype:hopper_accumulate") == 1
    assert pair_error(buf, start, gs, x) < 1e-6


def test_chunks_of_one_tensor_are_merged_into_one_step_of_their_rows(pairs_on_hopper):
    """Where both chunks are slices of one tensor the merged step reads one slice (no copy
    either way): one ``accumulate_`` of twice the rows, as off Hopper."""
    g, x = operands()
    compiled = compile_and_run(lambda b, g, x: chunks(b, g, x, out_dtype=torch.float32), torch.zeros(V, H), g, x)
    assert compiled.events("accumulate_pairs") == {"chains": 1, "pairs": BT // CHUNK // 2}
    assert "pair:hopper_accumulate" not in compiled.counts


def test_a_flce_loop_on_hopper_holds_at_most_two_chunks_of_logits(pairs_on_hopper):
    """A pair's first chunk of dlogits waits for the second; nothing copies them."""
    from helpers import most_alive
    from workloads import CHUNK as FLCE_CHUNK, CHUNKS as FLCE_CHUNKS, V as FLCE_V, flce_inputs, flce_like

    from inductor_addmm_fix.inductor.passes import chunk_order

    if not chunk_order.supported():
        pytest.skip("no preserve_node_ordering in this torch: chunks are not ordered")
    x, w, onehot = flce_inputs(torch.bfloat16)
    compiled = compile_and_run(lambda x, w, y: flce_like(x, w, y), x, w, onehot, no_grad=True)
    (code,) = compiled.codes
    assert compiled.events("accumulate_pairs")["split"] == FLCE_CHUNKS // 2
    assert compiled.events("chunk_order")["chunks"] == FLCE_CHUNKS
    assert most_alive(code, (FLCE_CHUNK, FLCE_V)) <= 2
    for got, want in zip(compiled.result, flce_like(x.double(), w.double(), onehot.double())):
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)  # bf16


def test_a_pair_whose_accumulator_is_read_afterwards_writes_a_new_buffer(pairs_on_hopper):
    """The functional chain's first accumulator is read after it (not re-inplaceable):
    its pair runs ``addmm_pair`` into a new buffer, the next pair in place into that."""
    def chain(acc, gs, x):
        out = acc
        for k, g in enumerate(gs):
            out = torch.addmm(out, g.t(), x[k * CHUNK : (k + 1) * CHUNK], out_dtype=torch.float32)
        return out, acc * 2

    gs, x = separate_chunks(4)
    start = torch.randn(V, H)
    compiled = compile_and_run(chain, start, gs, x)
    assert compiled.events("accumulate_pairs")["split"] == 2
    assert compiled.code.count("inductor_addmm_fix.addmm_pair.default(") == 1
    assert compiled.code.count("inductor_addmm_fix.accumulate_pair_.default(") == 1
    assert pair_error(compiled.result[0], start, gs, x) < 1e-6
    assert torch.equal(compiled.result[1], start * 2)


def test_off_hopper_a_pair_of_separate_chunks_is_stacked_as_before(feature_on):
    inductor_addmm_fix.install()
    gs, x = separate_chunks(2)
    compiled = compile_and_run(lambda b, gs, x: accumulate_separate_chunks(b, gs, x, out_dtype=torch.float32),
                               torch.zeros(V, H), gs, x)
    assert compiled.events("accumulate_pairs") == {"chains": 1, "pairs": 1}
    assert "accumulate_pair_" not in compiled.code


def test_turning_the_feature_off_takes_its_splitter_from_accumulate_pairs(pairs_on_hopper):
    from inductor_addmm_fix.inductor.passes import fx_support

    assert accumulate_kernel.NAME in fx_support.SPLITTERS
    inductor_addmm_fix.install("-accumulate_kernel")
    assert accumulate_kernel.NAME not in fx_support.SPLITTERS
    gs, x = separate_chunks(2)
    compiled = compile_and_run(lambda b, gs, x: accumulate_separate_chunks(b, gs, x, out_dtype=torch.float32),
                               torch.zeros(V, H), gs, x)
    assert compiled.events("accumulate_pairs") == {"chains": 1, "pairs": 1}  # stacked, as off Hopper


def test_the_pair_op_runs_two_steps_where_the_pair_kernel_does_not_apply(monkeypatch):
    def kernel(*args):
        raise AssertionError("the pair kernel ran")

    monkeypatch.setattr(hopper_accumulate, "accumulate_pair", kernel)
    gs, x = separate_chunks(2)
    for start in (torch.randn(V, H), torch.randn(V, H, dtype=torch.bfloat16)):
        buf = start.clone()
        accumulate_kernel.accumulate_pair_op()(buf, gs[0].t(), x[:CHUNK], gs[1].t(), x[CHUNK:])
        assert pair_error(buf, start, gs, x) < (1e-6 if start.dtype == torch.float32 else 1e-2)


def test_the_pair_kernel_takes_what_it_takes_of_each_step(hopper_device):
    c, a, b = flce_step(k=128)
    assert hopper_accumulate.supports_pair(c, a, b, a, b)
    assert hopper_accumulate.supports_pair(c, a, b, *flce_step(k=512)[1:])  # 512 rows into fp32: each step's most
    assert not hopper_accumulate.supports_pair(c, a, b, *flce_step(k=513)[1:])
    assert not hopper_accumulate.supports_pair(c, a, b, a.contiguous(), b)  # the second's A row-major


# ---------------------------------------------------------------- the kernel (needs Triton)
needs_triton = pytest.mark.skipif(not has_triton(), reason="Triton is not installed")


def interpreter_runs_descriptors() -> bool:
    """The interpreters of Triton 3.4 and 3.5 (torch 2.8, 2.9) cannot load through tensor
    descriptors (they check row strides in elements, then fail converting a block:
    "only 0-dimensional arrays can be converted to Python scalars"); Triton 3.9's can."""
    import triton

    return tuple(int(p) for p in triton.__version__.split(".")[:2]) >= (3, 6)


needs_interpreter = pytest.mark.skipif(not has_triton() or not interpreter_runs_descriptors(),
                                       reason="Triton's interpreter before 3.6 cannot run tensor descriptors")

_INTERPRETED = """
import torch, triton
from inductor_addmm_fix.inductor import hopper_accumulate as k
torch.manual_seed({seed})
for c_dtype, (m, n, kk) in [(torch.float32, (200, 136, 70)), (torch.float16, (136, 264, 64)), (torch.float32, (128, 128, 1))]:
    g = torch.randn(kk, m, dtype=torch.float16)   # the interpreter reads bf16 wrongly: fp16 operands
    x = torch.randn(kk, n, dtype=torch.float16)
    c = torch.randn(m, n, dtype=c_dtype)
    want = c.double() + g.double().t() @ x.double()
    k.accumulate(c, g.t(), x)
    print(c_dtype, ((c.double() - want).norm() / want.norm()).item())
"""

_INTERPRETED_PAIR = """
import torch, triton
from inductor_addmm_fix.inductor import hopper_accumulate as k
torch.manual_seed({seed})
for c_dtype, (m, n, k1, k2) in [(torch.float32, (200, 136, 70, 33)), (torch.float16, (136, 264, 64, 128)), (torch.float32, (128, 128, 1, 1))]:
    g, g2 = torch.randn(k1, m, dtype=torch.float16), torch.randn(k2, m, dtype=torch.float16)
    x, x2 = torch.randn(k1, n, dtype=torch.float16), torch.randn(k2, n, dtype=torch.float16)
    c = torch.randn(m, n, dtype=c_dtype)
    want = c.double() + g.double().t() @ x.double() + g2.double().t() @ x2.double()
    k.accumulate_pair(c, g.t(), x, g2.t(), x2)
    print(c_dtype, ((c.double() - want).norm() / want.norm()).item())
"""


def interpreted(script: str, seed: int) -> list[float]:
    """The relative errors ``script`` prints, run by Triton's interpreter on the CPU."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script.format(seed=seed))],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return [float(line.split()[-1]) for line in out.stdout.splitlines()]


@needs_interpreter
def test_the_kernel_adds_the_product_into_the_accumulator(seeded_random):
    """Triton's interpreter on the CPU: edges of every tile dimension (M, N, K not
    multiples of the tile), K = 1, an fp32 and an fp16 accumulator."""
    errors = interpreted(_INTERPRETED, seeded_random)
    assert len(errors) == 3, errors
    assert errors[0] < 1e-6 and errors[2] < 1e-6  # fp32: one rounding of each sum
    assert errors[1] < 1e-3  # fp16: one rounding to fp16


@needs_interpreter
def test_the_pair_kernel_adds_both_products_into_the_accumulator(seeded_random):
    """As above, two products of different K (off the tile, equal, both 1)."""
    errors = interpreted(_INTERPRETED_PAIR, seeded_random)
    assert len(errors) == 3, errors
    assert errors[0] < 1e-6 and errors[2] < 1e-6
    assert errors[1] < 1e-3


@needs_triton
@pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION is unset:UserWarning")  # Triton 3.9's own, when building
@pytest.mark.parametrize("c_dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("pair", [False, True], ids=["one product", "pair"])
def test_the_kernel_builds_for_hopper_with_wgmma_and_no_spills(c_dtype, pair):
    """Compiled for capability 9.0 without a GPU: Hopper's matrix instructions (HGMMA),
    tensor-memory copies (UTMALDG), no local memory, the shared memory of three programs
    per multiprocessor."""
    import shutil
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    config = hopper_accumulate.DEFAULT
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    desc = lambda dtype, block: f"tensordesc<{dtype}[{block[0]}, {block[1]}]>"  # noqa: E731
    operands = {"g_desc": desc("bf16", [bk, bm]), "x_desc": desc("bf16", [bk, bn])}
    if pair:
        operands |= {"g2_desc": desc("bf16", [bk, bm]), "x2_desc": desc("bf16", [bk, bn])}
    signature = {**operands, "c_desc": desc(c_dtype, [bm, bn]), "M": "i32", "N": "i32", "K": "i32",
                 **({"K2": "i32"} if pair else {}),
                 "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "GROUP": "constexpr"}
    constants = {"BM": bm, "BN": bn, "BK": bk, "GROUP": config.group_m}
    kernel = hopper_accumulate.pair_kernel() if pair else hopper_accumulate.kernel()
    built = triton.compile(ASTSource(kernel, signature=signature, constexprs=constants),
                           target=GPUTarget("cuda", 90, 32),
                           options=dict(num_warps=config.warps, num_stages=config.stages))
    cuobjdump = shutil.which("cuobjdump", path=os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin"))
    if cuobjdump is None:
        pytest.skip("no cuobjdump in this Triton")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(built.asm["cubin"])
        f.flush()
        sass = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True).stdout
        usage = subprocess.run([cuobjdump, "-res-usage", f.name], capture_output=True, text=True).stdout
    assert "HGMMA" in sass and "UTMALDG" in sass and "UTMASTG" in sass
    assert "STACK:0" in usage and "LOCAL:0" in usage, usage
    assert built.metadata.shared * 3 <= 232448  # three programs per multiprocessor
