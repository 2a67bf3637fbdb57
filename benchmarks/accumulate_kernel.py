"""The package's Hopper accumulate kernel against cuBLAS, one FLCE step at a time.

    python benchmarks/accumulate_kernel.py                 # the LLM heads' steps, and smaller accumulators
    python benchmarks/accumulate_kernel.py --shape 128256x4096x256:bf16 --reps 50
    python benchmarks/accumulate_kernel.py --sweep --json sweep.json   # every candidate Config per shape
    python benchmarks/accumulate_kernel.py --pairs         # two chunks' steps into one C, four ways

Each row is one in-place step ``C += g.t() @ x`` as Liger's FusedLinearCrossEntropy makes
it (``g`` a chunk's ``[K, M]`` logits gradient, ``x`` its ``[K, N]`` rows, C ``[M, N]`` in
fp32 or bf16): cuBLAS (``torch.addmm(C, g.t(), x, out=C)``, with ``out_dtype`` for an fp32
C) against ``hopper_accumulate.accumulate``, median ms of --reps after warm-up (CUDA
events), their ratio, the bandwidth floor (C read and written, g read, at 4.3 TB/s) and
the compute floor (at 773 TFLOP/s), each one's error against float64, and whether
``hopper_accumulate.supports`` takes the step (the rule the package applies).  Needs a
Hopper GPU and Triton.  ``--sweep`` times each of the candidate tilings and grids
(:func:`candidates`: tile shapes, warps, pipeline stages) on each shape against cuBLAS,
the data behind ``hopper_accumulate.DEFAULT``.  ``--pairs`` times two consecutive steps
of K rows each (two chunks, each gradient its own tensor, as a merged pair of
``accumulate_pairs`` has them) four ways: two cuBLAS steps, one cuBLAS step over a ``cat``
of both chunks (the copy included), two steps of the kernel, and the pair kernel (one
pass over C, each chunk read where it lies).
"""

from __future__ import annotations

import argparse
import sys

import torch
from accumulate_k import median_ms
from flce_shapes import HEADS, liger_chunk

# (name, M = vocabulary, N = hidden, K = a chunk's rows, C dtype): each head's steps in
# benchmarks/flce_shapes.py at BT 4096-32768 (Liger's chunk into a bf16 C, accum_dtype=None;
# a merged pair of chunks into an fp32 C, accum_dtype=fp32), then smaller accumulators.
SHAPES = [
    (f"{head} BT {bt}{' pair' if c == 'fp32' else ''}", v, h, liger_chunk(h, v, bt) * (2 if c == "fp32" else 1), c)
    for head, (h, v, _) in HEADS.items() for bt in (4096, 8192, 16384, 32768) for c in ("bf16", "fp32")
] + [
    ("llama2 head", 32000, 4096, 256, "bf16"), ("llama2 head", 32000, 4096, 256, "fp32"),
    ("32000x2048", 32000, 2048, 256, "bf16"), ("32000x2048", 32000, 2048, 256, "fp32"),
    ("gpt2 head", 50304, 768, 128, "bf16"), ("gpt2 head", 50304, 768, 256, "fp32"),
    ("8192x4096", 8192, 4096, 256, "bf16"), ("8192x4096", 8192, 4096, 256, "fp32"),
]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def candidates():
    """The Configs --sweep times."""
    from inductor_addmm_fix.inductor.hopper_accumulate import Config

    return [Config(bm, bn, bk, warps, stages) for bm, bn, bk, warps, stages in [
        (128, 128, 64, 4, 2), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3), (128, 128, 64, 4, 4),
        (128, 256, 64, 8, 2), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 64, 64, 4, 3),
        (64, 128, 64, 4, 4), (64, 256, 64, 4, 3), (128, 128, 128, 8, 2), (64, 128, 128, 4, 2)]]


def label(config) -> str:
    return f"{config.block_m}x{config.block_n}x{config.block_k} w{config.warps} s{config.stages}"


def step_operands(m: int, n: int, k: int, c_name: str) -> tuple:
    """(g, x, C, cublas): one FLCE step's random operands (g ``[k, m]``, x ``[k, n]`` in
    bf16, C ``[m, n]`` in ``c_name``), and ``cublas(C)``, the step on cuBLAS into C."""
    dtype = DTYPES[c_name]
    g = torch.randn(k, m, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    kw = {"out_dtype": torch.float32} if dtype == torch.float32 else {}
    return g, x, torch.randn(m, n, device="cuda", dtype=dtype), lambda c: torch.addmm(c, g.t(), x, out=c, **kw)


def sweep(shapes, reps: int, json_path: str | None) -> None:
    """Per shape: cuBLAS, then each candidate (ms, ratio), best first."""
    import json

    from inductor_addmm_fix.inductor import hopper_accumulate

    results = []
    for name, m, n, k, c_name in shapes:
        g, x, c, cublas = step_operands(m, n, k, c_name)
        t_cublas = median_ms(lambda: cublas(c), reps)
        timed = []
        for config in candidates():
            try:
                ms = median_ms(lambda: hopper_accumulate.accumulate(c, g.t(), x, config), reps)
            except Exception as error:  # a tiling that does not fit (shared memory) or build
                timed.append((label(config), None, f"{type(error).__name__}: {str(error)[:80]}"))
                continue
            timed.append((label(config), ms, ""))
        ok = sorted((t for t in timed if t[1] is not None), key=lambda t: t[1])
        print(f"\n## {name}: M {m} N {n} K {k} C {c_name}: cuBLAS {t_cublas:.3f} ms")
        for lab, ms, _ in ok[:8]:
            print(f"  {ms:.3f} ms  {ms / t_cublas:.3f}  {lab}")
        default = next((t for t in timed if t[0] == label(hopper_accumulate.DEFAULT)), None)
        if default and default[1] is not None:
            print(f"  default {default[1]:.3f} ms {default[1] / t_cublas:.3f}")
        failed = [t for t in timed if t[1] is None]
        if failed:
            print(f"  failed: {len(failed)} ({failed[0][0]}: {failed[0][2]})")
        results.append(dict(name=name, m=m, n=n, k=k, c=c_name, cublas_ms=t_cublas,
                            candidates=[dict(config=lab, ms=ms, error=err) for lab, ms, err in timed]))
        del g, x, c
        torch.cuda.empty_cache()
        if json_path:
            with open(json_path, "w") as f:
                json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=results), f, indent=1)


def row(name: str, m: int, n: int, k: int, c_name: str, reps: int) -> dict:
    from inductor_addmm_fix.inductor import hopper_accumulate

    g, x, start, cublas_step = step_operands(m, n, k, c_name)
    want = start.double().addmm_(g.t().double(), x.double())

    def error(c):
        return ((c.double() - want).norm() / want.norm()).item()

    cublas, ours = start.clone(), start.clone()
    cublas_step(cublas)
    hopper_accumulate.accumulate(ours, g.t(), x)
    again = start.clone()
    hopper_accumulate.accumulate(again, g.t(), x)
    deterministic = torch.equal(ours, again)
    errors = (error(cublas), error(ours))
    del want, again, ours
    c = start
    t_cublas = median_ms(lambda: cublas_step(c), reps)
    t_ours = median_ms(lambda: hopper_accumulate.accumulate(c, g.t(), x), reps)
    bandwidth = (2 * m * n * c.element_size() + k * m * 2 + k * n * 2) / 4.3e12 * 1e3
    compute = 2 * m * n * k / 773e12 * 1e3
    return dict(name=name, m=m, n=n, k=k, c=c_name, cublas_ms=t_cublas, kernel_ms=t_ours, ratio=t_ours / t_cublas,
                bandwidth_floor_ms=bandwidth, compute_floor_ms=compute, cublas_error=errors[0], kernel_error=errors[1],
                deterministic=deterministic, taken=hopper_accumulate.supports(c, g.t(), x))


def pair_row(name: str, m: int, n: int, k: int, c_name: str, reps: int) -> dict:
    from inductor_addmm_fix.inductor import hopper_accumulate

    g, x, start, _ = step_operands(m, n, k, c_name)
    g2, x2, _, _ = step_operands(m, n, k, c_name)
    kw = {"out_dtype": torch.float32} if start.dtype == torch.float32 else {}
    want = start.double().addmm_(g.t().double(), x.double()).addmm_(g2.t().double(), x2.double())

    def error(c):
        return ((c.double() - want).norm() / want.norm()).item()

    ways = {
        "cublas_two": lambda c: (torch.addmm(c, g.t(), x, out=c, **kw), torch.addmm(c, g2.t(), x2, out=c, **kw)),
        "cublas_cat": lambda c: torch.addmm(c, torch.cat([g, g2]).t(), torch.cat([x, x2]), out=c, **kw),
        "kernel_two": lambda c: (hopper_accumulate.accumulate(c, g.t(), x), hopper_accumulate.accumulate(c, g2.t(), x2)),
        "pair": lambda c: hopper_accumulate.accumulate_pair(c, g.t(), x, g2.t(), x2),
    }
    errors = {}
    for way, run in ways.items():
        c = start.clone()
        run(c)
        errors[way] = error(c)
        del c
    del want
    c = start
    ms = {way: median_ms(lambda: run(c), reps) for way, run in ways.items()}
    return dict(name=name, m=m, n=n, k=k, c=c_name, ms=ms, errors=errors,
                taken=hopper_accumulate.supports_pair(c, g.t(), x, g2.t(), x2))


def pairs(shapes, reps: int) -> None:
    print("| steps | M | N | K each | C | cuBLAS two ms | cuBLAS cat ms | kernel two ms | pair ms | pair / best other "
          "| error vs float64 cuBLAS two / pair | taken |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        r = pair_row(*shape, reps=reps)
        ms, err = r["ms"], r["errors"]
        best = min(v for way, v in ms.items() if way != "pair")
        print(f"| {r['name']} | {r['m']} | {r['n']} | {r['k']} | {r['c']} | {ms['cublas_two']:.3f} | "
              f"{ms['cublas_cat']:.3f} | {ms['kernel_two']:.3f} | {ms['pair']:.3f} | {ms['pair'] / best:.3f} | "
              f"{err['cublas_two']:.1e} / {err['pair']:.1e} | {'yes' if r['taken'] else 'no'} |", flush=True)
        torch.cuda.empty_cache()


#: Two chunks of each head's steps at BT 4096-16384 (Liger's chunk rows, K each).
PAIR_SHAPES = [
    (f"{head} BT {bt}", v, h, liger_chunk(h, v, bt), c)
    for head, (h, v, _) in HEADS.items() for bt in (4096, 8192, 16384) for c in ("bf16", "fp32")
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", action="append", help="MxNxK:bf16|fp32 (repeatable); default: the table's shapes")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--sweep", action="store_true", help="time every candidate Config per shape (the table's, or --shape)")
    p.add_argument("--json", help="with --sweep: write every timing here")
    p.add_argument("--pairs", action="store_true", help="two chunks' steps four ways (the pair table's shapes, or --shape)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("needs a Hopper GPU (CUDA capability 9.0)")
        return 2
    shapes = PAIR_SHAPES if args.pairs else SHAPES
    if args.shape:
        shapes = []
        for spec in args.shape:
            dims, _, c = spec.partition(":")
            m, n, k = (int(d) for d in dims.split("x"))
            shapes.append((spec, m, n, k, c or "bf16"))
    import triton

    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    if args.sweep:
        sweep(shapes, args.reps, args.json)
        return 0
    if args.pairs:
        pairs(shapes, args.reps)
        return 0
    print("| step | M | N | K | C | cuBLAS ms | kernel ms | kernel / cuBLAS | floor ms (bytes / FLOPs) "
          "| error vs float64 cuBLAS / kernel | deterministic | taken |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        r = row(*shape, reps=args.reps)
        print(f"| {r['name']} | {r['m']} | {r['n']} | {r['k']} | {r['c']} | {r['cublas_ms']:.3f} | {r['kernel_ms']:.3f} | "
              f"{r['ratio']:.3f} | {r['bandwidth_floor_ms']:.3f} / {r['compute_floor_ms']:.3f} | "
              f"{r['cublas_error']:.1e} / {r['kernel_error']:.1e} | {'yes' if r['deterministic'] else 'NO'} | "
              f"{'yes' if r['taken'] else 'no'} |", flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
