"""What one pass over an accumulator costs for k chunks' products (cuBLAS, CUDA).

    python benchmarks/accumulate_k.py [--v 128256 --h 4096 --chunk 256 --k 1 2 3 4] [--triton]

Times ``torch.addmm(C, g.t(), x, out_dtype=torch.float32, out=C)`` (an fp32 accumulator,
Liger FLCE with ``accum_dtype=torch.float32``) and ``torch.addmm(C, g.t(), x, out=C)`` (a
bf16 accumulator, ``accum_dtype=None``) with ``K = k x chunk`` rows, and a copy of the
fp32 accumulator (the bandwidth floor of one pass).  Median of 30 after 3 warm-ups
(CUDA events); prints ms per pass and per chunk of rows.  ``--triton`` adds an in-place
Triton GEMM with the accumulate in its epilogue (autotuned over a few tile shapes, its C
tile loaded before the K loop so that the read overlaps the product), checked against
cuBLAS's result: the "accumulate kernel nearer the bandwidth floor" lever.
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


def triton_accumulate(autotune: bool = True):
    """``C += A @ B`` in place by a Triton kernel: fp32 product, C's dtype on store
    (``autotune=False``: one small tile shape, for Triton's interpreter)."""
    import triton
    import triton.language as tl

    configs = [
        triton.Config({"BM": bm, "BN": bn, "BK": 64, "GROUP": 8}, num_warps=w, num_stages=s)
        for bm, bn, w, s in [(128, 128, 4, 3), (128, 128, 8, 4), (128, 256, 8, 3), (256, 128, 8, 3), (64, 256, 4, 4), (128, 64, 4, 4)]
    ]

    @triton.jit
    def kernel(C, A, B, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        pid = tl.program_id(0)
        num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = pid // (GROUP * num_n)
        first_m = group * GROUP
        size_m = min(num_m - first_m, GROUP)
        pid_m = first_m + (pid % (GROUP * num_n)) % size_m
        pid_n = (pid % (GROUP * num_n)) // size_m
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        c_ptrs = C + rm[:, None] * scm + rn[None, :] * scn
        c = tl.load(c_ptrs, mask=mask)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(A + rm[:, None] * sam + (k + rk)[None, :] * sak, mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
            b = tl.load(B + (k + rk)[:, None] * sbk + rn[None, :] * sbn, mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
        tl.store(c_ptrs, (c.to(tl.float32) + acc).to(C.dtype.element_ty), mask=mask)

    fixed = {} if autotune else {"BM": 32, "BN": 32, "BK": 32, "GROUP": 4}
    if autotune:
        kernel = triton.autotune(configs=configs, key=["M", "N", "K"], restore_value=["C"])(kernel)

    def run(c, a, b):
        M, N, K = c.shape[0], c.shape[1], a.shape[1]
        grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)  # noqa: E731
        kernel[grid](c, a, b, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), **fixed)
        return c

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--v", type=int, default=128256)
    parser.add_argument("--h", type=int, default=4096)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--triton", action="store_true", help="also time a Triton kernel with the accumulate in its epilogue")
    args = parser.parse_args()
    V, H = args.v, args.h
    c32 = torch.zeros(V, H, device="cuda")
    c16 = torch.zeros(V, H, device="cuda", dtype=torch.bfloat16)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; C [{V}x{H}], chunks of {args.chunk} rows")
    print(f"copy of the fp32 accumulator: {median_ms(lambda: c32.clone()):.3f} ms")
    tri = triton_accumulate() if args.triton else None
    extra = " Triton fp32 ms | Triton bf16 ms | Triton max rel. diff vs cuBLAS (fp32, bf16) |" if tri else ""
    print("| k | K | fp32 accumulate ms | per chunk | bf16 accumulate ms | per chunk |" + extra)
    print("|---|---|---|---|---|---|" + ("---|---|---|" if tri else ""))
    for k in args.k:
        K = k * args.chunk
        g = torch.randn(K, V, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(K, H, device="cuda", dtype=torch.bfloat16)
        f32 = median_ms(lambda: torch.addmm(c32, g.t(), x, out_dtype=torch.float32, out=c32))
        b16 = median_ms(lambda: torch.addmm(c16, g.t(), x, out=c16))
        row = f"| {k} | {K} | {f32:.3f} | {f32 / k:.3f} | {b16:.3f} | {b16 / k:.3f} |"
        if tri:
            t32 = median_ms(lambda: tri(c32, g.t(), x))
            t16 = median_ms(lambda: tri(c16, g.t(), x))
            diffs = []
            for dtype in (torch.float32, torch.bfloat16):
                base = torch.randn(V, H, device="cuda").to(dtype)
                want = torch.addmm(base, g.t(), x, **({"out_dtype": torch.float32} if dtype == torch.float32 else {}))
                got = tri(base.clone(), g.t(), x)
                diffs.append(((got.float() - want.float()).abs().max() / want.float().abs().max()).item())
            row += f" {t32:.3f} | {t16:.3f} | {diffs[0]:.1e}, {diffs[1]:.1e} |"
        print(row)
        del g, x


if __name__ == "__main__":
    main()
