"""Where a Liger FLCE step spends GPU time and memory, eager vs compiled, in one run.

For each accum dtype: the kernels of one warmed-up forward+backward step, grouped by
name, with their GPU time (torch.profiler), and the blocks alive at the step's memory
peak with the Python frame that allocated them (the CUDA caching allocator's history;
for compiled code the frame is a line of Inductor's generated wrapper).

    python benchmarks/flce_profile.py --bt 8192 [--top 15] [--json out.json]

Needs CUDA and liger-kernel.  This explains the figures of flce_bench.py; it measures
one step, so its times are not the benchmark's medians.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys

import torch

MiB = 1024**2


def make_step(bt: int, h: int, v: int, accum, compiled: bool):
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    x = torch.randn(bt, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(v, h, device="cuda", dtype=torch.bfloat16) * h**-0.5).requires_grad_()
    t = torch.randint(v, (bt,), device="cuda")

    def loss_fn(x, w, t):
        return liger_fused_linear_cross_entropy(x, w, t, accum_dtype=accum)

    fn = torch.compile(loss_fn) if compiled else loss_fn

    def step():
        fn(x, w, t).backward()

    def clear():
        x.grad = w.grad = None

    return step, clear


def kernel_table(step, clear, top: int):
    from torch.profiler import ProfilerActivity, profile

    clear()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    rows = collections.defaultdict(lambda: [0.0, 0])
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            r = rows[evt.name[:90]]
            r[0] += evt.device_time / 1e3  # us -> ms
            r[1] += 1
    total = sum(r[0] for r in rows.values())
    ranked = sorted(rows.items(), key=lambda kv: -kv[1][0])
    return total, [(name, ms, n) for name, (ms, n) in ranked[:top]]


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
        for compiled in (False, True):
            mode = "compiled" if compiled else "eager"
            step, clear = make_step(args.bt, args.h, args.v, accum, compiled)
            for _ in range(3):
                clear()
                step()
            torch.cuda.synchronize()
            total, kernels = kernel_table(step, clear, args.top)
            peak, blocks = live_at_peak(step, clear, args.min_mib)
            print(f"\n## accum_dtype={label}, BT={args.bt}, {mode}: GPU kernels {total:.2f} ms, "
                  f"peak of the step's own allocations {peak / 2**30:.3f} GiB")
            print(f"{'ms':>9} {'calls':>6}  kernel")
            for name, ms, n in kernels:
                print(f"{ms:9.3f} {n:6d}  {name}")
            print(f"{'MiB':>9} {'count':>6}  alive at the peak, allocated at")
            for where, size, n in blocks:
                print(f"{size / MiB:9.1f} {n:6d}  {where}")
            report.append(dict(accum=label, mode=mode, bt=args.bt, kernel_ms=total, kernels=kernels,
                               peak_gib=peak / 2**30, blocks=blocks))
            del step, clear
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
