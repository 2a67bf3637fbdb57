"""Compiled ``torch.mm(x, w.t(), out_dtype=torch.float32)`` against eager's cuBLAS call.

    python benchmarks/mm_dtype.py                      # Liger's JSD logits products, static and dynamic
    python benchmarks/mm_dtype.py --mode max-autotune-no-cudagraphs --reps 50
    python benchmarks/mm_dtype.py --calls 1           # one call per timing: its host time counts too

Liger's fused linear JSD computes each chunk's fp32 logits with
``torch.mm(inputs, weight.t(), out_dtype=torch.float32)`` (``aten.mm.dtype``): bf16
operands, an fp32 product, no bf16 rounding.  Each row times that one product, eager
(cuBLAS) and compiled with the package (the lowering ``mm.dtype`` takes), alternating,
median of --reps CUDA-event timings after warm-up, each over --calls calls back to back
(default 20: as in Liger's chunk loop, the host's work for one call overlaps the GPU's
for the one before; with ``--calls 1`` a lone call's host time, its guards and
wrappers, falls inside the timing), for a head's chunk of rows (Liger's
chunk size at BT --bt) and for all BT rows, the student's and the teacher's hidden size.
Static rows compile for the shape; dynamic rows mark the row count dynamic
(``torch._dynamo.mark_dynamic``).  It prints eager and compiled ms, their ratio, the
lowering's counters, the kernel the generated code calls (an extern call or a Triton
template), the output dtype and whether compiled equals eager bit for bit.  Needs a CUDA
GPU (eager CPU has no kernel for ``mm.dtype``).
"""

from __future__ import annotations

import argparse
import re

import torch
from flce_bench import timed_interleaved
from flce_shapes import liger_chunk
from liger_losses import JSD_PAIRS


def logits(x, w):
    return torch.mm(x, w.t(), out_dtype=torch.float32)


def kernel_called(code: str) -> str:
    """What the generated wrapper calls for the product."""
    extern = re.findall(r"extern_kernels\.(\w+)\(", code)
    if extern:
        return "extern " + ",".join(sorted(set(extern)))
    templates = re.findall(r"def (triton_\w*(?:mm|tem)\w*)\(", code)
    return "template " + ",".join(sorted(set(templates))) if templates else "?"


def row(head: str, which: str, rows: int, h: int, v: int, graph: str, mode: str, reps: int, warmup: int, calls: int) -> dict:
    from torch._dynamo.utils import counters
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    x = torch.randn(rows, h, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(v, h, device="cuda", dtype=torch.bfloat16) / h ** 0.5
    if graph == "dynamic":
        torch._dynamo.mark_dynamic(x, 0)
    fn = torch.compile(logits, mode=mode, dynamic=False if graph == "static" else None)
    before = dict(counters["inductor_addmm_fix"])
    out, code = run_and_get_code(fn, x, w)
    fired = {k: c - before.get(k, 0) for k, c in counters["inductor_addmm_fix"].items() if c != before.get(k, 0)}
    expected = logits(x, w)

    def eager():
        for _ in range(calls):
            logits(x, w)

    def compiled():
        for _ in range(calls):
            fn(x, w)

    timed = timed_interleaved({"eager": eager, "compiled": compiled}, warmup=warmup, reps=reps)
    eager_ms, compiled_ms = timed["eager"][0] / calls, timed["compiled"][0] / calls
    flop = 2 * rows * h * v
    return dict(head=head, operand=which, rows=rows, h=h, v=v, graph=graph, mode=mode or "default", calls=calls,
                eager_ms=eager_ms, compiled_ms=compiled_ms, ratio=compiled_ms / eager_ms,
                eager_tflops=flop / eager_ms / 1e9, counters=fired, kernel=kernel_called("\n".join(code)),
                dtype=str(out.dtype).removeprefix("torch."), bitwise=torch.equal(out, expected),
                max_diff=(out - expected).abs().max().item())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--heads", nargs="+", choices=list(JSD_PAIRS), default=list(JSD_PAIRS))
    p.add_argument("--bt", type=int, default=4096, help="tokens per step (default 4096)")
    p.add_argument("--graphs", nargs="+", choices=("static", "dynamic"), default=["static", "dynamic"])
    p.add_argument("--mode", default=None, help="torch.compile mode (default: none)")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--calls", type=int, default=20, help="calls back to back per timing (default 20)")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    import inductor_addmm_fix  # noqa: F401  (activates the package where its .pth did not)

    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, BT {args.bt}, mode {args.mode or 'default'}, "
          f"median of {args.reps} after {args.warmup} warm-ups, {args.calls} calls back to back per timing, "
          "eager and compiled alternating; ms per call")
    print("| head | operand (H) | rows | V | graph | eager ms | eager TFLOP/s | compiled ms | ratio | kernel | counters | dtype | bitwise |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for head in args.heads:
        hs, ht, v = JSD_PAIRS[head]
        chunk = liger_chunk(hs, v, args.bt)
        for which, h in (("student", hs), ("teacher", ht)):
            for rows in (chunk, args.bt):
                for graph in args.graphs:
                    r = row(head, which, rows, h, v, graph, args.mode, args.reps, args.warmup, args.calls)
                    results.append(r)
                    counted = ", ".join(f"`{k}` {c}" for k, c in r["counters"].items()) or "-"
                    print(f"| {head} | {which} ({h}) | {rows} | {v} | {graph} | {r['eager_ms']:.3f} | {r['eager_tflops']:.0f} | "
                          f"{r['compiled_ms']:.3f} | {r['ratio']:.3f} | {r['kernel']} | {counted} | {r['dtype']} | "
                          f"{'yes' if r['bitwise'] else 'no (max diff %.1e)' % r['max_diff']} |", flush=True)
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
