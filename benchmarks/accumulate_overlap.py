"""A chunk's two backward products, one after the other or side by side on two streams.

    python benchmarks/accumulate_overlap.py                  # each head at BT 8192 and 16384
    python benchmarks/accumulate_overlap.py --case qwen2.5-7b:8192 --reps 50

Per chunk Liger's FusedLinearCrossEntropy reads its logits gradient ``g`` ``[K, V]`` twice:
``grad_input[rows] = g @ W`` (a product over V: the tensor cores' speed) and
``grad_weight += g.t() @ x`` (K, the chunk's rows, only 128-1024: a read and write of the
whole ``[V, H]`` accumulator, the memory's speed).  Both read ``g`` and nothing else of each
other, so they may run at once without a byte more memory.  This times, per head and BT
(Liger's chunk rows, bf16 accumulator as with ``accum_dtype=None``, fp32 as with fp32):
each product alone, both on one stream, and both on two streams (the accumulate on a side
stream, joined before the next chunk), with the accumulate on cuBLAS and on the package's
Hopper kernel where it takes the step.  Median ms of --reps (CUDA events around both).
Whether the GPU runs the two kernels side by side decides whether a compiled step could
gain from it.  Needs a CUDA GPU (the kernel rows: Hopper).
"""

from __future__ import annotations

import argparse
import sys

import torch
from accumulate_k import median_ms
from flce_shapes import HEADS, liger_chunk, parse_cases


def operands(h: int, v: int, k: int, c_dtype: torch.dtype) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*size, dtype=torch.bfloat16):
        return torch.randn(*size, device="cuda", dtype=dtype, generator=gen)

    return dict(w=randn(v, h), g=randn(k, v), x=randn(k, h), c=randn(v, h, dtype=c_dtype), gi=randn(k, h))


def ways(t: dict, side: torch.cuda.Stream) -> dict:
    """name -> callable; each runs on the current stream and returns when both products
    are queued, the current stream waiting for the side stream's work."""
    from inductor_addmm_fix.inductor import hopper_accumulate

    w, g, x, c, gi = t["w"], t["g"], t["x"], t["c"], t["gi"]
    kw = {"out_dtype": torch.float32} if c.dtype == torch.float32 else {}

    def grad_input():
        torch.mm(g, w, out=gi)

    def cublas():
        torch.addmm(c, g.t(), x, out=c, **kw)

    def kernel():
        hopper_accumulate.accumulate(c, g.t(), x)

    def two_streams(accumulate):
        def run():
            main = torch.cuda.current_stream()
            side.wait_stream(main)
            with torch.cuda.stream(side):
                accumulate()
            grad_input()
            main.wait_stream(side)
        return run

    out = {
        "grad_input alone": grad_input,
        "accumulate alone (cuBLAS)": cublas,
        "one stream (cuBLAS)": lambda: (grad_input(), cublas()),
        "two streams (cuBLAS)": two_streams(cublas),
    }
    if hopper_accumulate.on_hopper(c.device) and hopper_accumulate.triton_supported() is None and hopper_accumulate.sizes_supported(
            c.dtype, c.shape[0], c.shape[1], g.shape[0]):
        out["accumulate alone (kernel)"] = kernel
        out["one stream (kernel)"] = lambda: (grad_input(), kernel())
        out["two streams (kernel)"] = two_streams(kernel)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", action="append", help="HEAD:BT[,BT...]; default: every head at 8192,16384")
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 2
    try:
        cases = parse_cases(args.case or [f"{head}:8192,16384" for head in HEADS])
    except ValueError as error:
        p.error(str(error))
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; median ms of {args.reps}")
    print("| head | BT | K | C | grad_input alone | accumulate alone | one stream | two streams | two / one "
          "| two / max(alone) | accumulate by |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    side = torch.cuda.Stream()
    for head, bt in cases:
        h, v, _ = HEADS[head]
        k = liger_chunk(h, v, bt)
        for c_dtype in (torch.bfloat16, torch.float32):
            t = operands(h, v, k, c_dtype)
            ms = {name: median_ms(run, args.reps) for name, run in ways(t, side).items()}
            for by in ("cuBLAS", "kernel"):
                if f"one stream ({by})" not in ms:
                    continue
                alone, one, two = ms[f"accumulate alone ({by})"], ms[f"one stream ({by})"], ms[f"two streams ({by})"]
                print(f"| {head} | {bt} | {k} | {str(c_dtype).removeprefix('torch.')} | {ms['grad_input alone']:.3f} | "
                      f"{alone:.3f} | {one:.3f} | {two:.3f} | {two / one:.3f} | {two / max(alone, ms['grad_input alone']):.3f} "
                      f"| {by} |", flush=True)
            del t
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
