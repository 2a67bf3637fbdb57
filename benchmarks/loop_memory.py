"""The memory a compiled chunk loop keeps alive, on the CPU: Liger's fused linear JSD loop
in pure torch (its body as Liger 0.8.5 writes it, the dispatched kernel as torch ops),
compiled under several package feature selections, each in a fresh interpreter.

Per selection it prints the peak of the buffers Inductor's generated wrapper holds at once
(read from the code: each ``empty_strided`` allocation, ``# reuse`` and ``del``), in MiB
and in chunks' fp32 logits, which buffers make up that peak, eager's peak (from the
profiler's allocation records; accum None only, as eager CPU has no ``out_dtype`` kernel),
and Inductor's own estimate
of the peak (``torch._inductor.memory.estimate_peak_memory``, which picks the order
``reorder_for_peak_memory`` keeps).  A CPU proxy for the GPU's extra memory of a compiled
loop: the wrapper's buffers are what the caching allocator is asked for.

    python benchmarks/loop_memory.py                                  # all, 0, -accumulate_pairs, -chunk_order
    python benchmarks/loop_memory.py --features all,-accumulate_pairs --accum fp32 --no-reorder
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import re
import subprocess
import sys

DTYPE_BYTES = {"torch.float32": 4, "torch.bfloat16": 2, "torch.float16": 2, "torch.int64": 8, "torch.int32": 4,
               "torch.bool": 1}  # fmt: skip
ALLOCATION = re.compile(r"(buf\d+) = empty_strided_\w+\(\(([^)]*)\), \([^)]*\), (torch\.\w+)\)")
REUSE = re.compile(r"(buf\d+) = (buf\d+); del \2  # reuse")
FREE = re.compile(r"del (buf\d+)")


def wrapper_peak(code: str) -> tuple[int, collections.Counter]:
    """The most bytes of buffers the wrapper ``code`` holds at once, and the buffers
    (shape, dtype) alive then."""
    live: dict[str, tuple[int, str]] = {}
    current = peak = 0
    at_peak: dict[str, tuple[int, str]] = {}
    for line in code.splitlines():
        allocation = ALLOCATION.search(line)
        if allocation:
            name, sizes, dtype = allocation.groups()
            nbytes = math.prod(int(s) for s in sizes.replace(" ", "").split(",") if s) * DTYPE_BYTES.get(dtype, 4)
            live[name] = (nbytes, f"({sizes}) {dtype.removeprefix('torch.')}")
            current += nbytes
            if current > peak:
                peak, at_peak = current, dict(live)
            continue
        reuse = REUSE.search(line)
        if reuse:
            live[reuse.group(1)] = live.pop(reuse.group(2), (0, "?"))
            continue
        for name in FREE.findall(line):
            current -= live.pop(name, (0, "?"))[0]
    return peak, collections.Counter(kind for _, kind in at_peak.values())


def jsd_forward(student_input, student_weight, teacher_input, teacher_weight, accum_dtype, temperature=1.0, beta=0.5):
    """Liger 0.8.5's ``fused_linear_jsd_forward`` (no labels), the dispatched
    ``jsd_loss_and_grad`` written in torch ops."""
    import torch

    bt, h = student_input.shape
    inc_factor = -(-student_weight.shape[0] // h)
    chunk_size = min(1 << math.ceil(math.log2(-(-bt // inc_factor))), bt)
    grad_weight = torch.zeros_like(student_weight, dtype=accum_dtype or student_weight.dtype)
    grad_input = torch.zeros_like(student_input)
    total_loss = torch.zeros((), dtype=torch.float32)
    for start in range(0, bt, chunk_size):
        end = min(start + chunk_size, bt)
        student_chunk, teacher_chunk = student_input[start:end], teacher_input[start:end]
        student_logits = (student_chunk @ student_weight.t()).float() / temperature
        teacher_logits = (teacher_chunk @ teacher_weight.t()).float() / temperature
        student_prob = torch.log_softmax(student_logits, dim=-1)
        teacher_prob = torch.log_softmax(teacher_logits, dim=-1)
        softmax_s = torch.softmax(student_logits, dim=-1)
        p, q = student_prob.exp(), teacher_prob.exp()
        log_m = (beta * p + (1 - beta) * q).log()
        loss = beta * p * (student_prob - log_m) + (1 - beta) * q * (teacher_prob - log_m)
        dx = beta * p * (student_prob - log_m)
        total_loss = total_loss + loss.sum()
        grad_logits = ((dx - softmax_s * dx.sum(dim=-1, keepdim=True)) / temperature).to(student_input.dtype)
        grad_input[start:end] = grad_logits @ student_weight
        if accum_dtype is None:
            grad_weight.addmm_(grad_logits.t(), student_chunk)
        else:
            torch.addmm(grad_weight, grad_logits.t(), student_chunk, out_dtype=accum_dtype, out=grad_weight)
    if accum_dtype is not None:
        grad_weight = grad_weight.to(student_weight.dtype)
    return total_loss, grad_input, grad_weight


@contextlib.contextmanager
def inductor_estimates():
    """The peak-memory estimates (bytes) Inductor makes inside the block, in the list it
    yields: what ``reorder_for_peak_memory`` chooses its order by."""
    import torch._inductor.memory as memory

    estimates, stock = [], memory.estimate_peak_memory

    def estimate_peak_memory(*args, **kwargs):
        result = stock(*args, **kwargs)
        estimates.append(result[0])
        return result

    memory.estimate_peak_memory = estimate_peak_memory
    try:
        yield estimates
    finally:
        memory.estimate_peak_memory = stock


def eager_peak(fn) -> float:
    """The most bytes ``fn``'s eager run held at once beyond what existed before it, from
    the profiler's allocation records (an op's own allocations, and frees)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    changes = sorted((e.time_range.start, e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage)
                     for e in prof.events())  # fmt: skip
    current = peak = 0
    for _, change in changes:
        current += change
        peak = max(peak, current)
    del result
    return peak


def one(args) -> dict:
    """One selection, in this interpreter (the package reads INDUCTOR_ADDMM_FIX at import)."""
    import torch

    import inductor_addmm_fix  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    from torch._inductor.utils import run_and_get_code

    torch._inductor.config.reorder_for_peak_memory = args.reorder
    torch._inductor.config.force_disable_caches = True
    torch.manual_seed(0)
    bt, hs, ht, v = args.bt, args.student_h, args.teacher_h, args.vocab
    si, ti = torch.randn(bt, hs, dtype=torch.bfloat16), torch.randn(bt, ht, dtype=torch.bfloat16)
    sw, tw = torch.randn(v, hs, dtype=torch.bfloat16) / hs**0.5, torch.randn(v, ht, dtype=torch.bfloat16) / ht**0.5
    accum = {"None": None, "fp32": torch.float32}[args.accum]
    eager = eager_peak(lambda: jsd_forward(si, sw, ti, tw, accum)) if accum is None else float("nan")
    with inductor_estimates() as estimates:
        _, codes = run_and_get_code(torch.compile(jsd_forward), si, sw, ti, tw, accum)
    peak, kinds = wrapper_peak(codes[0])
    chunk_rows = min(1 << math.ceil(math.log2(-(-bt // -(-v // hs)))), bt)
    from torch._dynamo.utils import counters

    return {"features": os.environ.get("INDUCTOR_ADDMM_FIX", "all"), "peak_mib": peak / 2**20, "eager_mib": eager / 2**20,
            "chunk_logits_mib": chunk_rows * v * 4 / 2**20, "chunks": -(-bt // chunk_rows),
            "at_peak": kinds.most_common(4), "inductor_estimates_mib": [e / 2**20 for e in estimates],
            "counters": dict(counters["inductor_addmm_fix"])}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--features", default="all,0,-accumulate_pairs,-chunk_order",
                   help="INDUCTOR_ADDMM_FIX values, ';'-separated where one holds a comma")  # fmt: skip
    p.add_argument("--accum", choices=("None", "fp32"), default="None")
    p.add_argument("--bt", type=int, default=512)
    p.add_argument("--student-h", type=int, default=64)
    p.add_argument("--teacher-h", type=int, default=128)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--no-reorder", dest="reorder", action="store_false", help="Inductor's reorder_for_peak_memory off")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args)))
        return
    selections = args.features.split(";") if ";" in args.features else args.features.split(",")
    print(f"JSD loop, BT {args.bt}, student H {args.student_h}, teacher H {args.teacher_h}, V {args.vocab}, "
          f"accum {args.accum}, reorder_for_peak_memory {'on' if args.reorder else 'off'} (CPU, bf16)")  # fmt: skip
    print(f"{'features':<28} {'eager MiB':>9} {'peak MiB':>9} {'/ chunk':>8} {'Inductor est. MiB':>18}  buffers at the peak")
    for features in selections:
        argv = [sys.executable, __file__, "--one", "--accum", args.accum, "--bt", str(args.bt), "--student-h",
                str(args.student_h), "--teacher-h", str(args.teacher_h), "--vocab", str(args.vocab)]  # fmt: skip
        if not args.reorder:
            argv.append("--no-reorder")
        done = subprocess.run(argv, env={**os.environ, "INDUCTOR_ADDMM_FIX": features}, capture_output=True, text=True)
        if done.returncode:
            print(f"{features:<28} failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        estimate = min(r["inductor_estimates_mib"], default=float("nan"))
        print(f"{features:<28} {r['eager_mib']:>9.2f} {r['peak_mib']:>9.2f} {r['peak_mib'] / r['chunk_logits_mib']:>8.1f} {estimate:>18.1f}  "
              f"{', '.join(f'{n} x {k}' for k, n in r['at_peak'])}")  # fmt: skip


if __name__ == "__main__":
    main()
