"""Where a Liger FLCE step spends GPU time and memory, eager vs compiled, in one run.

For each accum dtype: the kernels of warmed-up forward+backward steps (eager and compiled
in turn, medians over rounds), grouped by name and by kind (GEMM, Liger's kernel, the
rest), with their GPU time and the GPU's idle time within the step (torch.profiler;
the longest waits between two kernels, and which), and the blocks alive at the step's
memory peak with the Python frame that allocated them (the CUDA caching allocator's
history; for compiled code the frame is a line of Inductor's generated wrapper).

    python benchmarks/flce_profile.py --bt 8192 [--rounds 7] [--top 15] [--json out.json]

Needs CUDA and liger-kernel.  This explains the figures of flce_bench.py; the profiler
adds its own overhead, so its medians are not the benchmark's.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys

import torch
from flce_bench import flce_case  # the same inputs and steps as the benchmark

MiB = 1024**2


def category(kernel: str) -> str:
    if kernel.startswith(("nvjet", "sm90_", "sm80_", "ampere_", "cutlass")) or "splitKreduce" in kernel or "gemm" in kernel.lower():
        return "gemm"
    if "liger" in kernel:
        return "liger"
    return "other"


def kernel_table(step, clear, top: int):
    from torch.profiler import ProfilerActivity, profile

    clear()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    rows = collections.defaultdict(lambda: [0.0, 0])
    spans = []
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            r = rows[evt.name[:90]]
            r[0] += evt.device_time / 1e3  # us -> ms
            r[1] += 1
            spans.append((evt.time_range.start, evt.time_range.end, evt.name[:60]))
    total = sum(r[0] for r in rows.values())
    ranked = sorted(rows.items(), key=lambda kv: -kv[1][0])
    by_category = collections.defaultdict(lambda: [0.0, 0])
    for name, (ms, n) in rows.items():
        c = by_category[category(name)]
        c[0] += ms
        c[1] += n
    gaps = idle_gaps(spans)
    return (total, sum(ms for ms, _, _ in gaps), [(name, ms, n) for name, (ms, n) in ranked[:top]], dict(by_category),
            sorted(gaps, reverse=True)[:5])


def idle_gaps(spans) -> list:
    """[(ms, kernel before, kernel after)] for each stretch of the step, between its first
    and last kernel, when no kernel ran: the host not keeping up (launch overhead, guards,
    a graph break after a sync).  ``spans``: (start us, end us, name) of each kernel."""
    gaps = []
    if not spans:
        return gaps
    spans.sort()
    cur_end, last = spans[0][1], spans[0][2]
    for start, end, name in spans[1:]:
        if start > cur_end:
            gaps.append(((start - cur_end) / 1e3, last, name))
        if end >= cur_end:
            cur_end, last = end, name
    return gaps


def _frame(frames) -> str:
    """The innermost frame outside torch's own Python (generated code counts as ours)."""
    for f in frames:
        name = f.get("filename", "")
        if "torchinductor" in name or ("/torch/" not in name and name not in ("", "??")):
            return f"{name.rsplit('/', 1)[-1]}:{f.get('line')} {f.get('name')}"
    return "?"


def live_at_peak(step, clear, min_mib: float):
    """Blocks alive when the step's allocated bytes peaked (above the bytes before it)."""
    clear()
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
    try:
        step()
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    live: dict[int, tuple[int, str]] = {}
    cur = peak = 0
    at_peak: dict[int, tuple[int, str]] = {}
    for trace in snap["device_traces"]:
        for e in trace:
            if e["action"] == "alloc":
                live[e["addr"]] = (e["size"], _frame(e.get("frames", [])))
                cur += e["size"]
                if cur > peak:
                    peak, at_peak = cur, dict(live)
            elif e["action"] == "free_requested" and e["addr"] in live:
                cur -= live.pop(e["addr"])[0]
    big = collections.Counter()
    for size, where in at_peak.values():
        if size >= min_mib * MiB:
            big[(where, size)] += 1
    rows = sorted(((w, s, n) for (w, s), n in big.items()), key=lambda r: -r[1] * r[2])
    return peak, rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bt", type=int, default=8192)
    p.add_argument("--h", type=int, default=4096)
    p.add_argument("--v", type=int, default=128256)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--min-mib", type=float, default=16.0)
    p.add_argument("--accum", choices=["fp32", "None", "both"], default="both")
    p.add_argument("--rounds", type=int, default=7, help="profiled steps per mode (medians)")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    import inductor_addmm_fix  # noqa: F401  (normally activated at start-up)

    accums = {"fp32": [torch.float32], "None": [None], "both": [torch.float32, None]}[args.accum]
    report = []
    for accum in accums:
        label = "fp32" if accum else "None"
        fns, step_of, clear, _, _ = flce_case(args.bt, args.h, args.v, torch.bfloat16, accum)
        steps = {mode: step_of(fn) for mode, fn in fns.items()}
        for _ in range(3):
            for step in steps.values():
                clear()
                step()
        torch.cuda.synchronize()
        # Rounds alternate eager and compiled, so that drift affects both alike.
        rounds: dict = {mode: [] for mode in steps}
        for _ in range(args.rounds):
            for mode, step in steps.items():
                rounds[mode].append(kernel_table(step, clear, args.top))
        summary = {}
        for mode, step in steps.items():
            med = lambda xs: statistics.median(xs)  # noqa: E731
            total = med([r[0] for r in rounds[mode]])
            idle = med([r[1] for r in rounds[mode]])
            cats = {c: (med([r[3].get(c, [0.0, 0])[0] for r in rounds[mode]]), rounds[mode][-1][3].get(c, [0.0, 0])[1])
                    for c in ("gemm", "liger", "other")}
            peak, blocks = live_at_peak(step, clear, args.min_mib)
            summary[mode] = (total, idle, cats, peak)
            print(f"\n## accum_dtype={label}, BT={args.bt}, {mode}: median of {args.rounds} steps: GPU kernels "
                  f"{total:.2f} ms, GPU idle {idle:.2f} ms; peak of the step's own allocations {peak / 2**30:.3f} GiB")
            print(f"{'ms':>9} {'calls':>6}  kernel (last step)")
            for name, ms, n in rounds[mode][-1][2]:
                print(f"{ms:9.3f} {n:6d}  {name}")
            print(f"{'idle ms':>9}  the longest waits of the last step, between kernels")
            for ms, before, after in rounds[mode][-1][4]:
                print(f"{ms:9.3f}  {before} -> {after}")
            print(f"{'MiB':>9} {'count':>6}  alive at the peak, allocated at")
            for where, size, n in blocks:
                print(f"{size / MiB:9.1f} {n:6d}  {where}")
            report.append(dict(accum=label, mode=mode, bt=args.bt, rounds=args.rounds, kernel_ms=total, idle_ms=idle,
                               categories=cats, kernels=rounds[mode][-1][2], peak_gib=peak / 2**30, blocks=blocks,
                               longest_waits=rounds[mode][-1][4]))
        (te, ie, ce, _), (tc, ic, cc, _) = summary["eager"], summary["compiled"]
        print(f"\n### accum_dtype={label}: compiled - eager, medians (ms): kernels {tc - te:+.3f} "
              f"(gemm {cc['gemm'][0] - ce['gemm'][0]:+.3f}, liger {cc['liger'][0] - ce['liger'][0]:+.3f}, "
              f"other {cc['other'][0] - ce['other'][0]:+.3f} in {cc['other'][1]} vs {ce['other'][1]} launches), "
              f"idle {ic - ie:+.3f}")
        del fns, steps, step_of, clear
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
