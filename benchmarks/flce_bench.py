"""Eager vs torch.compile (with inductor_addmm_fix) for Liger FLCE, in one run.

Prints one table: median step time over many warmed-up repetitions (CUDA
events; eager and compiled steps alternate), peak memory above what was
allocated before the step, and ratios against eager; plus the one-chunk
accumulation micro-benchmark against eager cuBLAS and the memory-bound floor
measured on this GPU.

    python benchmarks/flce_bench.py                      # Llama-3-8B head: BT=8192 H=4096 V=128256
    python benchmarks/flce_bench.py --bt 8192 32768       # and chunks of 1024 rows
    python benchmarks/flce_bench.py --json out.json

Needs CUDA and liger-kernel.  "extra" memory = torch.cuda.max_memory_allocated()
during one forward+backward step minus what was allocated before it (inputs and
weights: .grad is cleared before the baseline is read, so the step's new gradients
count as extra).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

GiB = 1024**3


def timed(fn, *, warmup: int, reps: int, sync_each: bool = True, setup=lambda: None) -> tuple[float, float]:
    """(median ms, peak extra bytes) of fn() over reps runs after warmup runs; setup()
    runs before each, untimed and before the memory baseline is read (clears .grad).

    sync_each=True waits for the GPU after every call, so host overhead (Dynamo's
    guards, the wrapper) shows in the time; sync_each=False queues the calls
    back to back, as a training loop does, and times what the GPU spends on each."""
    return timed_interleaved({"": fn}, warmup=warmup, reps=reps, sync_each=sync_each, setup=setup)[""]


def timed_interleaved(fns: dict, *, warmup: int, reps: int, sync_each: bool = True, setup=lambda: None) -> dict:
    """{label: (median ms, peak extra bytes)}: the functions run in turn, one timed call
    each per round, so that clock or thermal drift during the run affects them alike;
    setup() and sync_each as for :func:`timed`."""
    for _ in range(warmup):
        for fn in fns.values():
            setup()
            fn()
    torch.cuda.synchronize()
    events: dict = {label: [] for label in fns}
    peaks: dict = {label: 0 for label in fns}
    for _ in range(reps):
        for label, fn in fns.items():
            setup()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            if sync_each:
                torch.cuda.synchronize()
            events[label].append((start, end))
            peaks[label] = max(peaks[label], torch.cuda.max_memory_allocated() - before)
    torch.cuda.synchronize()
    return {label: (statistics.median(s.elapsed_time(e) for s, e in events[label]), peaks[label]) for label in fns}


def profiled(fn, *, steps: int = 2, setup=lambda: None):
    """(GPU busy ms per step, ``prof.key_averages()``) of ``steps`` calls of fn() under
    ``torch.profiler`` (CPU and CUDA); setup() runs before each call."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            setup()
            fn()
        torch.cuda.synchronize()
    events = prof.key_averages()
    # the kernels' own time: an operator's event counts its kernels' time as its own too
    kernels = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    busy = sum(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)) for e in kernels)
    return busy / 1000 / steps, events


def device_sort_key(events) -> str:
    """The key that sorts ``events.table`` by GPU time, as this torch names it."""
    return "self_device_time_total" if hasattr(events[0], "device_time_total") else "self_cuda_time_total"


def flce_rows(bt: int, h: int, v: int, dtype, warmup: int, reps: int, suffix: str = "", mode=None, accums=(torch.float32, None)):
    rows = []
    for accum in accums:
        rows.append(flce_row(bt, h, v, dtype, accum, warmup, reps, suffix, mode))
        print("# row:", json.dumps(rows[-1]), flush=True)  # as it completes: a run cut short keeps it
        torch.cuda.empty_cache()  # the row's tensors died with its frame
    return rows


def flce_case(bt: int, h: int, v: int, dtype, accum, mode=None):
    """Fresh random inputs of a Liger FLCE step and what runs on them: ({"eager": loss_fn,
    "compiled": compiled loss_fn}, step(fn) -> a callable running one forward+backward,
    clear() -> drops .grad, run(fn) -> (loss, grad_x, grad_w) of one step, and the
    inputs (x, w, t)).  ``mode``: torch.compile's mode ("reduce-overhead": CUDA graphs,
    each step marked as a new one)."""
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    x = torch.randn(bt, h, device="cuda", dtype=dtype, requires_grad=True)
    w = (torch.randn(v, h, device="cuda", dtype=dtype) * h**-0.5).requires_grad_()
    t = torch.randint(v, (bt,), device="cuda")

    def loss_fn(x, w, t):
        return liger_fused_linear_cross_entropy(x, w, t, accum_dtype=accum)

    compiled = torch.compile(loss_fn, mode=mode)
    graphs = mode in ("reduce-overhead", "max-autotune")

    def clear():
        x.grad = w.grad = None

    def step(fn):
        def one_step():
            if graphs and fn is compiled:
                torch.compiler.cudagraph_mark_step_begin()
            fn(x, w, t).backward()

        return one_step

    def run(fn):
        clear()
        if graphs and fn is compiled:
            torch.compiler.cudagraph_mark_step_begin()
        loss = fn(x, w, t)
        loss.backward()
        return loss.detach().clone(), x.grad.clone(), w.grad.clone()  # clones: graph memory is reused

    return {"eager": loss_fn, "compiled": compiled}, step, clear, run, (x, w, t)


def float64_reference(x, w, t, rows: int = 1024, softcap=None, ignore_index=None):
    """(loss, grad_x, grad_w) of mean cross entropy over ``x @ w.t()`` (capped as
    ``softcap * tanh(z / softcap)`` when given), in float64, chunk by chunk; targets equal
    to ``ignore_index`` are left out of the mean."""
    x64, w64 = x.detach().double(), w.detach().double()
    keep = t != ignore_index if ignore_index is not None else torch.ones_like(t, dtype=torch.bool)
    n = keep.sum().double()
    loss = torch.zeros((), dtype=torch.float64, device=x.device)
    grad_x, grad_w = torch.empty_like(x64), torch.zeros_like(w64)
    for start in range(0, t.numel(), rows):
        xs, ts, ks = x64[start : start + rows], t[start : start + rows], keep[start : start + rows]
        logits = xs @ w64.t()
        if softcap is not None:
            capped = torch.tanh(logits / softcap)
            logits = softcap * capped
        tt = ts.clamp(min=0)
        loss += ((logits.logsumexp(-1) - logits.gather(1, tt[:, None])[:, 0]) * ks).sum()
        g = torch.softmax(logits, -1)
        g[torch.arange(ts.numel(), device=ts.device), tt] -= 1
        g *= ks[:, None].double() / n
        if softcap is not None:
            g *= 1 - capped * capped
        grad_x[start : start + rows] = g @ w64
        grad_w += g.t() @ xs
        del logits, g
    return loss / n, grad_x, grad_w


def relative_errors(got, want) -> dict:
    """||got - want|| / ||want|| of (loss, grad_x, grad_w)."""
    return {
        name: ((a.double() - b).norm() / b.norm()).item() for name, a, b in zip(("loss", "grad_x", "grad_w"), got, want)
    }


def versus(eager: tuple[float, float], compiled: tuple[float, float]) -> dict:
    """Table fields of (median ms, peak extra bytes) for eager and compiled."""
    (te, me), (tc, mc) = eager, compiled
    return dict(
        eager_ms=te,
        compiled_ms=tc,
        time_ratio=tc / te,
        eager_extra_gib=me / GiB,
        compiled_extra_gib=mc / GiB,
    )


def flce_row(bt: int, h: int, v: int, dtype, accum, warmup: int, reps: int, suffix: str, mode=None) -> dict:
    """Eager vs compiled Liger FLCE step on fresh random inputs: time, memory, equality,
    and each one's error against float64."""
    from torch._dynamo.utils import counters

    counters["inductor_addmm_fix"].clear()  # what the package did to this case's graphs
    fns, step, clear, run, inputs = flce_case(bt, h, v, dtype, accum, mode)
    results = timed_interleaved({k: step(f) for k, f in fns.items()}, warmup=warmup, reps=reps, setup=clear)
    for label, fn in fns.items():
        for again in ("_out", "_again"):
            results[label + again] = run(fn)
    same = all(torch.equal(a, b) for a, b in zip(results["eager_out"], results["compiled_out"]))
    # Where not bitwise equal: is eager itself repeatable, and how far apart are they?
    eager_repeatable = all(torch.equal(a, b) for a, b in zip(results["eager_out"], results["eager_again"]))
    diffs = {
        name: (a.double() - b.double()).abs().max().item()
        for name, a, b in zip(("loss", "grad_x", "grad_w"), results["eager_out"], results["compiled_out"])
    }
    reference = float64_reference(*inputs)
    errors = {label: relative_errors(results[label + "_out"], reference) for label in fns}
    del reference
    me = results["eager"][1]
    return dict(
        case=f"FLCE step, accum_dtype={'fp32' if accum else 'None'}, BT={bt}{suffix}" + (f", mode={mode}" if mode else ""),
        **versus(results["eager"], results["compiled"]),
        memory_target_gib=(me + max(0.05 * me, 64 * 1024**2)) / GiB,
        pairs_merged=counters["inductor_addmm_fix"]["accumulate_pairs:pairs"],
        pairs_over_budget=counters["inductor_addmm_fix"]["accumulate_pairs:over_budget"],
        bitwise_equal=same,
        eager_repeatable=eager_repeatable,
        max_abs_diff=diffs,
        eager_error_vs_float64=errors["eager"],
        compiled_error_vs_float64=errors["compiled"],
    )


def chunk_row(v: int, chunk: int, h: int, warmup: int, reps: int):
    """One chunk's accumulation: [V x chunk] @ [chunk x H] into an fp32 buffer, in place."""
    g = torch.randn(chunk, v, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(chunk, h, device="cuda", dtype=torch.bfloat16)
    gw = torch.randn(v, h, device="cuda")

    def accumulate(gw, g, x):
        torch.addmm(gw, g.t(), x, out_dtype=torch.float32, out=gw)
        return gw

    compiled = torch.compile(accumulate, fullgraph=True)
    # Queued back to back (GPU time per call), as in a training loop.
    queued = {
        label: timed(lambda fn=fn: fn(gw, g, x), warmup=warmup, reps=reps, sync_each=False)
        for label, fn in (("eager", accumulate), ("compiled", compiled))
    }
    # Synchronized after each call: host overhead included.
    te_sync, _ = timed(lambda: accumulate(gw, g, x), warmup=warmup, reps=reps)
    tc_sync, _ = timed(lambda: compiled(gw, g, x), warmup=warmup, reps=reps)
    # Memory-bound floor: read and write the fp32 buffer once, at this GPU's copy bandwidth.
    src = torch.empty_like(gw)
    tcopy, _ = timed(lambda: gw.copy_(src), warmup=warmup, reps=reps, sync_each=False)
    floor_ms = tcopy  # a copy reads and writes the same number of bytes
    a, b = gw.clone(), gw.clone()
    accumulate(a, g, x)
    compiled(b, g, x)
    return dict(
        case=f"one chunk [{v}x{chunk}]@[{chunk}x{h}] into fp32, in place (queued)",
        **versus(queued["eager"], queued["compiled"]),
        floor_ms=floor_ms,
        eager_sync_ms=te_sync,
        compiled_sync_ms=tc_sync,
        copy_tb_per_s=2 * gw.numel() * 4 / (tcopy / 1e3) / 1e12,
        bitwise_equal=torch.equal(a, b),
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bt", type=int, nargs="+", default=[8192])
    p.add_argument("--h", type=int, default=4096)
    p.add_argument("--v", type=int, default=128256)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--skip-flce", action="store_true")
    p.add_argument("--capture-scalars", action="store_true", help="torch._dynamo.config.capture_scalar_outputs=True")
    p.add_argument(
        "--cudagraphs",
        action="store_true",
        help="also run the fp32 FLCE row compiled with mode='reduce-overhead' (CUDA graphs) at the first --bt",
    )
    p.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="FEATURE",
        help="also run the FLCE rows with this feature of the package turned off (repeatable; "
        "a name of inductor_addmm_fix.FEATURES, e.g. accumulate_pairs)",
    )
    p.add_argument("--json")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 2
    import inductor_addmm_fix

    unknown = set(args.without) - set(inductor_addmm_fix.FEATURES)
    if unknown:
        p.error(f"--without: not a feature: {', '.join(sorted(unknown))} (features: {', '.join(inductor_addmm_fix.FEATURES)})")

    inductor_addmm_fix.install()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, inductor_addmm_fix {inductor_addmm_fix.__version__}")
    torch._dynamo.config.capture_scalar_outputs = args.capture_scalars
    print(f"# capture_scalar_outputs={args.capture_scalars}")
    rows = [chunk_row(args.v, 256, args.h, args.warmup, max(args.reps, 20))]
    if not args.skip_flce:
        for bt in args.bt:
            rows += flce_rows(bt, args.h, args.v, torch.bfloat16, args.warmup, args.reps)
            torch._dynamo.reset()
        if args.cudagraphs:
            rows += flce_rows(args.bt[0], args.h, args.v, torch.bfloat16, args.warmup, args.reps, mode="reduce-overhead", accums=(torch.float32,))
            torch._dynamo.reset()
        for name in args.without:
            # The public switch: the feature is rolled back, the others stay.
            inductor_addmm_fix.install(features=f"-{name}")
            torch._dynamo.reset()
            rows += flce_rows(args.bt[0], args.h, args.v, torch.bfloat16, args.warmup, args.reps, f" (without {name})")
            inductor_addmm_fix.install()
            torch._dynamo.reset()
    print(
        "| case | eager ms | compiled ms | time ratio | eager extra GiB | compiled extra GiB "
        "| memory bound GiB | time <= 1.00x | memory <= bound | bitwise equal | pairs merged |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        bound = r.get("memory_target_gib")
        r["time_met"] = r["time_ratio"] <= 1.0
        r["memory_met"] = bound is None or r["compiled_extra_gib"] <= bound
        print(
            f"| {r['case']} | {r['eager_ms']:.2f} | {r['compiled_ms']:.2f} | {r['time_ratio']:.3f} | "
            f"{r['eager_extra_gib']:.3f} | {r['compiled_extra_gib']:.3f} | "
            f"{'%.3f' % bound if bound is not None else '-'} | {'yes' if r['time_met'] else 'NO'} | "
            f"{'yes' if r['memory_met'] else 'NO'} | {r['bitwise_equal']} | {r.get('pairs_merged', '-')} |"
        )
    chunk = rows[0]
    for r in rows:
        if not r["bitwise_equal"] and "max_abs_diff" in r:
            print(f"# {r['case']}: eager repeatable {r['eager_repeatable']}, max |compiled - eager| {r['max_abs_diff']}")
    print("| case | eager error vs float64 (loss, grad_x, grad_w) | compiled error vs float64 |")
    print("|---|---|---|")
    for r in rows:
        if "eager_error_vs_float64" in r:
            e, c = r["eager_error_vs_float64"], r["compiled_error_vs_float64"]
            print(f"| {r['case']} | {e['loss']:.1e}, {e['grad_x']:.1e}, {e['grad_w']:.1e} | {c['loss']:.1e}, {c['grad_x']:.1e}, {c['grad_w']:.1e} |")
    print(f"# memory-bound floor of one chunk: {chunk['floor_ms']:.2f} ms (copy at {chunk['copy_tb_per_s']:.2f} TB/s)")
    print(
        f"# one chunk, synchronized after each call (host overhead included): eager {chunk['eager_sync_ms']:.2f} ms, "
        f"compiled {chunk['compiled_sync_ms']:.2f} ms, ratio {chunk['compiled_sync_ms'] / chunk['eager_sync_ms']:.3f}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
