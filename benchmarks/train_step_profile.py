"""Where a Liger-patched model's training step spends its time: eager, the model compiled
with Liger's head (the package's op in a graph with a symbolic token count), and the
model compiled with plain cross entropy, in one process, on the same batches.

Each head: its model built as ``compile_time.py`` builds it, two warm-up steps at other
lengths (so the compiled graph is the symbolic one that a run of changing lengths keeps),
then ``--steps`` steps at ``--tokens`` tokens timed (median, CUDA synchronised), then
two steps under ``torch.profiler``: the top kernels and CPU operators, and the GPU time
against the wall time of a step (the gap is host time the GPU waited for).

    python benchmarks/train_step_profile.py --model llama3-8b-head --tokens 1536
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from compile_time import MODELS, build, padded_batch, train_step
from flce_bench import device_sort_key, profiled


def batch(length: int, vocab: int, seed: int) -> dict:
    """Two sequences, of ``length`` and a third of it, right-padded as the training run pads."""
    return padded_batch((length, length // 3), vocab, torch.Generator().manual_seed(seed), "cuda")


def one_head(model_name: str, head: str, tokens: int, steps: int, top: int, graph: str = "model") -> dict:
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = build(model_name, "ce" if head == "ce" else "liger", "cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def loss_of(b):
        return model(**b).loss

    forward = loss_of if head == "eager" or graph == "step" else torch.compile(loss_of)

    def step(b):
        return train_step(optimizer, forward, b)

    if head != "eager" and graph == "step":  # the whole step: forward, backward, AdamW
        step = torch.compile(step)

    vocab = MODELS[model_name]["vocab_size"]
    for i, length in enumerate((tokens * 3 // 4, tokens * 5 // 4)):
        step(batch(length, vocab, seed=100 + i))
    walls = []
    b = batch(tokens, vocab, seed=1)
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step(b)
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - start) * 1000)
    gpu_ms, events = profiled(lambda: step(b), steps=2)
    print(f"\n## {model_name} {head}: step {statistics.median(walls):.1f} ms (median of {steps}), GPU busy {gpu_ms:.1f} ms "
          f"per step, graphs {counters['stats']['unique_graphs']}, package counters {dict(counters['inductor_addmm_fix'])}")
    print(events.table(sort_by=device_sort_key(events), row_limit=top))
    print(events.table(sort_by="self_cpu_time_total", row_limit=top // 2))
    del model, optimizer
    torch.cuda.empty_cache()
    return {"head": head, "step_ms": statistics.median(walls), "gpu_ms": gpu_ms}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama3-8b-head", choices=list(MODELS))
    p.add_argument("--tokens", type=int, default=1536, help="sequence length of the timed batch (batch 2)")
    p.add_argument("--heads", default="eager,liger,ce")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--compile", default="model", choices=("model", "step"), help="compile the model's loss, or the whole step")
    args = p.parse_args()
    import inductor_addmm_fix  # noqa: F401

    rows = [one_head(args.model, head, args.tokens, args.steps, args.top, args.compile) for head in args.heads.split(",")]
    eager = next((r for r in rows if r["head"] == "eager"), None)
    print(f"\n{args.model}, {args.compile} compiled, {args.tokens} tokens x 2")
    print(f"\n{'head':<8} {'step ms':>8} {'GPU ms':>8} {'/ eager':>8}  ({torch.cuda.get_device_name()}, torch {torch.__version__})")
    for r in rows:
        ratio = f"{r['step_ms'] / eager['step_ms']:.3f}" if eager else "-"
        print(f"{r['head']:<8} {r['step_ms']:>8.1f} {r['gpu_ms']:>8.1f} {ratio:>8}")


if __name__ == "__main__":
    main()
