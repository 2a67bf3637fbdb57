"""What one pass over an accumulator costs for k chunks' products (cuBLAS, CUDA).

    python benchmarks/accumulate_k.py [--v 128256 --h 4096 --chunk 256 --k 1 2 3 4]

Times ``torch.addmm(C, g.t(), x, out_dtype=torch.float32, out=C)`` (an fp32 accumulator,
Liger FLCE with ``accum_dtype=torch.float32``) and ``torch.addmm(C, g.t(), x, out=C)`` (a
bf16 accumulator, ``accum_dtype=None``) with ``K = k x chunk`` rows, and a copy of the
fp32 accumulator (the bandwidth floor of one pass).  Median of 30 after 3 warm-ups
(CUDA events); prints ms per pass and per chunk of rows.
"""

from __future__ import annotations

import argparse

import torch


def median_ms(fn, repeats: int = 30, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--v", type=int, default=128256)
    parser.add_argument("--h", type=int, default=4096)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 3, 4])
    args = parser.parse_args()
    V, H = args.v, args.h
    c32 = torch.zeros(V, H, device="cuda")
    c16 = torch.zeros(V, H, device="cuda", dtype=torch.bfloat16)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; C [{V}x{H}], chunks of {args.chunk} rows")
    print(f"copy of the fp32 accumulator: {median_ms(lambda: c32.clone()):.3f} ms")
    print("| k | K | fp32 accumulate ms | per chunk | bf16 accumulate ms | per chunk |")
    print("|---|---|---|---|---|---|")
    for k in args.k:
        K = k * args.chunk
        g = torch.randn(K, V, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(K, H, device="cuda", dtype=torch.bfloat16)
        f32 = median_ms(lambda: torch.addmm(c32, g.t(), x, out_dtype=torch.float32, out=c32))
        b16 = median_ms(lambda: torch.addmm(c16, g.t(), x, out=c16))
        print(f"| {k} | {K} | {f32:.3f} | {f32 / k:.3f} | {b16:.3f} | {b16 / k:.3f} |")
        del g, x


if __name__ == "__main__":
    main()
