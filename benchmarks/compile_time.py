"""Compile time of a decoder's training step with Liger's FLCE head, against the same
model with ``F.cross_entropy`` of the full logits, and with the FLCE head left eager.

A Llama-shaped decoder from a config (random weights, bf16 on CUDA), its whole training
step (forward, backward, AdamW) under ``torch.compile``, run over a sequence of lengths:
``static`` (one length) or ``changing`` (a new length most steps).  Heads:

* ``liger``: Liger's ``apply_liger_kernel_to_llama(model=...)``, its FLCE head compiled;
* ``ce``: the same Liger layers (RMSNorm, SwiGLU, RoPE) with Hugging Face's loss,
  ``F.cross_entropy`` of the full logits;
* ``liger-eager``: Liger's FLCE head left eager (``torch.compiler.disable`` around
  ``liger_fused_linear_cross_entropy``), the rest compiled.

Models: ``small-h`` (H 1024, V 151936, 2 layers: Liger's chunks are 8 rows at 1024
tokens, its loop runs 128 times), ``llama3-8b-head`` (H 4096, V 128256, one layer of
Llama 3 8B's shape), ``tiny`` and ``tiny-wide`` (for the CPU: V / H of 32 and 128, the ratios of
``llama3-8b-head`` and ``small-h``; Liger's kernels need a GPU, so on the CPU its FLCE is
the tests' pure-torch mimic of Liger's module, see ``--run``).

``--run``: a training run of ``--steps`` steps (default 40) whose batches of ``--batch``
sequences (2) have lengths drawn uniformly from ``--run-lengths`` (256-2048), right-padded
to the longest; the model's forward and loss compiled, or the whole step
(``--compile model,step``); heads ``eager`` (Liger's model, nothing compiled), ``ce``
(plain cross entropy, compiled), ``liger`` / ``liger-loop`` / ``liger-opaque`` (Liger's
head compiled with ``INDUCTOR_ADDMM_FIX_LIGER_HEAD`` unset, ``loop``, ``opaque``).  Per
run: the compile seconds (each compiling step's time over the steady step), graphs,
recompile-limit hits, the steady step (median of the last 10) against eager and ``ce``,
the median over the last 20 steps of each step against eager's step of the same batch
(``matched``: every run draws the same lengths), the replayed step (the last 10 batches
run 3 times more each, at lengths already compiled for: the median of their fastest
runs) against eager's, the garbage collector's pauses in the last 10 steps, the peak
memory (CUDA).  ``ce-off``: plain cross entropy with the package off.

    python benchmarks/compile_time.py --run --models small-h,llama3-8b-head      # GPU
    python benchmarks/compile_time.py --run --device cpu --models tiny,tiny-wide --run-lengths 16-128

Each (model, head, lengths) runs in a fresh interpreter with empty Inductor and Triton
caches, one after the other.  Per step it records the wall time, the graphs compiled so
far (``counters["stats"]["unique_graphs"]``), graph breaks, and where compile time went
from torch's own timers (``torch._dynamo.utils.compilation_time_metrics``, what
``compile_times()`` prints: Dynamo's tracing, AOTAutograd, Inductor's lowering and code
generation, waiting for kernels).  A step whose graphs grew is a compile: its time less
the median of the steps that compiled nothing is its compile time.

    python benchmarks/compile_time.py                       # GPU: both models, three heads, both shapes
    python benchmarks/compile_time.py --models small-h --heads liger,ce --shapes changing
    python benchmarks/compile_time.py --device cpu --models tiny --heads ce --lengths 64,96,48,80
    INDUCTOR_ADDMM_FIX=-triton_analysis_cache python benchmarks/compile_time.py ...   # a feature off

Each step also records the package's counters (``counters["inductor_addmm_fix"]``, e.g.
``triton_analysis_cache:hit``) and each run the features it ran with.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = {
    "small-h": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=2, num_attention_heads=16,
                    num_key_value_heads=8, vocab_size=151936),
    "llama3-8b-head": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=1, num_attention_heads=32,
                           num_key_value_heads=8, vocab_size=128256),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=2048),
    "tiny-wide": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=8192),
}  # fmt: skip
# ``pow2``: changing lengths that are powers of two, where Liger's loop runs the same number
# of chunks at every length (``BT / next_power_of_2(cdiv(BT, cdiv(V, H)))``): one graph of
# the loop per power of two (its chunk size a constant); at the ``changing`` lengths it
# runs a new number each step, and Dynamo, which unrolls the loop, compiles its frame again
# for each (docs/upstream/dynamo-loop-over-a-symbolic-count.md).
SHAPES = {
    "static": (1024, 1024, 1024, 1024, 1024, 1024),
    "changing": (1024, 1536, 768, 1280, 896, 1152),
    "pow2": (1024, 2048, 512, 1024, 2048, 512),
}
HEADS = ("liger", "ce", "liger-eager")
#: heads of the run mode: Liger's head with the package's setting (INDUCTOR_ADDMM_FIX_LIGER_HEAD),
#: plain cross entropy compiled, and Liger's model eager (nothing compiled)
RUN_HEADS = {"liger": "auto", "liger-loop": "loop", "liger-opaque": "opaque", "ce": None, "eager": None, "ce-off": None}
#: heads run with the package off (``INDUCTOR_ADDMM_FIX=0``): what torch alone compiles
PACKAGE_OFF = {"ce-off": "ce"}
#: torch's timers shown for a compile, each a phase (the timers nest: these overlap little)
PHASES = {
    "bytecode_tracing": "Dynamo tracing",
    "aot_trace_joint_graph": "AOTAutograd tracing",
    "_recursive_joint_graph_passes": "joint passes",
    "_recursive_post_grad_passes": "post-grad passes",
    "GraphLowering.run": "Inductor lowering",
    "Scheduler.__init__": "scheduling",
    "GraphLowering.codegen": "code generation",
    "async_compile.wait": "waiting for kernels",
    "compile_file": "C++ compile",
}


# ---------------------------------------------------------------- one run (a fresh interpreter)
def build(model_name: str, head: str, device: str):
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**MODELS[model_name], attn_implementation="sdpa")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype).train()
    if device == "cuda":  # Liger's kernels are Triton kernels
        import liger_kernel.transformers as liger
        import liger_kernel.transformers.functional as functional

        liger.apply_liger_kernel_to_llama(model=model, fused_linear_cross_entropy=head not in ("ce", "ce-eager"))
        if head == "liger-eager":
            functional.liger_fused_linear_cross_entropy = torch.compiler.disable(functional.liger_fused_linear_cross_entropy)
    elif head != "ce":
        raise SystemExit(f"head {head!r} needs CUDA (Liger's Triton kernels)")
    return model


def liger_chunks(model_name: str, tokens: int) -> int:
    """How many chunks Liger's FLCE loop runs for ``tokens`` rows (Liger 0.8.5)."""
    from inductor_addmm_fix.dynamo.liger_head import liger_chunks as chunks

    h, v = MODELS[model_name]["hidden_size"], MODELS[model_name]["vocab_size"]
    return chunks((tokens, h), (v, h))


def timers() -> dict[str, float]:
    from torch._dynamo.utils import compilation_time_metrics

    return {name: sum(times) for name, times in compilation_time_metrics.items()}


def train_step(optimizer, loss_of, batch):
    """One training step: the loss of ``batch``, its backward, the optimizer's update."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_of(batch)
    loss.backward()
    optimizer.step()
    return loss.detach()


def run_one(spec: dict) -> dict:
    import torch
    from torch._dynamo.utils import counters

    import inductor_addmm_fix  # noqa: F401  (active where installed; imported for a checkout on PYTHONPATH)

    device = spec["device"]
    model = build(spec["model"], spec["head"], device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batch):
        return train_step(optimizer, lambda b: model(**b).loss, batch)

    compiled = torch.compile(step)
    generator = torch.Generator().manual_seed(0)
    vocab = MODELS[spec["model"]]["vocab_size"]
    rows = []
    counters.clear()
    for length in spec["lengths"]:
        ids = torch.randint(vocab, (1, length), generator=generator)
        labels = ids.clone()
        labels[:, -length // 8 :] = -100  # a padded tail
        batch = {"input_ids": ids.to(device), "labels": labels.to(device)}
        before, graphs_before = timers(), counters["stats"]["unique_graphs"]
        start = time.perf_counter()
        loss = compiled(batch).item()  # .item(): waits for the device
        wall = time.perf_counter() - start
        after = timers()
        spent = {k: after[k] - before.get(k, 0.0) for k in after if after[k] - before.get(k, 0.0) > 1e-3}
        rows.append({
            "length": length, "wall_s": wall, "loss": loss, "graphs": counters["stats"]["unique_graphs"],
            "new_graphs": counters["stats"]["unique_graphs"] - graphs_before, "liger_chunks": liger_chunks(spec["model"], length),
            "graph_breaks": sum(counters["graph_break"].values()), "timers_s": spent,
            "package_counters": dict(counters["inductor_addmm_fix"]),
        })  # fmt: skip
        print(STEP + json.dumps(rows[-1]), flush=True)  # what a run cut off by --timeout still reports
    features = os.environ.get("INDUCTOR_ADDMM_FIX", "all")  # the package's features in this run
    return {**spec, "steps": rows, "torch": torch.__version__, "features": features}


def run_lengths(steps: int, batch: int, low: int, high: int, seed: int = 0) -> list[list[int]]:
    """Each step's sequence lengths, drawn uniformly from [low, high] (seeded)."""
    import random

    draw = random.Random(seed)
    return [[draw.randint(low, high) for _ in range(batch)] for _ in range(steps)]


def padded_batch(lengths, vocab: int, generator, device) -> dict:
    """A batch of sequences of these lengths with random tokens, right-padded to the
    longest: the padding masked and labelled -100."""
    import torch

    longest = max(lengths)
    ids = torch.randint(vocab, (len(lengths), longest), generator=generator)
    mask = torch.zeros(len(lengths), longest, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "labels": labels.to(device)}


def training_run(spec: dict) -> dict:
    """``--run``: a training run whose batches are right-padded to their longest sequence:
    compile seconds, graphs, recompile-limit hits, the steady step (median of the last 10),
    the peak memory."""
    import logging

    import torch
    from torch._dynamo.utils import counters

    import inductor_addmm_fix  # noqa: F401

    device = spec["device"]
    head = PACKAGE_OFF.get(spec["head"], spec["head"])
    liger_head = head not in ("ce",)
    # Liger's kernels need CUDA: on the CPU its FLCE is the pure-torch mimic of tests/
    # (Liger's chunk loop, signature and module name), on the hidden states of the model
    mimic = liger_head and device == "cpu"
    model = build(spec["model"], "ce" if head == "ce" or mimic else "liger", device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    limit_hits = []

    class Hits(logging.Handler):
        def emit(self, record):
            text = record.getMessage()
            if "recompile_limit" in text or "cache_size_limit" in text:
                limit_hits.append(text.splitlines()[0][:200])

    logging.getLogger("torch._dynamo").addHandler(Hits())
    if mimic:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
        from helpers import liger_mimic

        imported = liger_mimic()  # kept: it puts back sys.modules when it is closed
        liger = imported.__enter__()  # for the whole run

        def loss_of(batch):
            hidden = model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
            rows = hidden[:, :-1].reshape(-1, hidden.shape[-1])
            return liger.flce(rows, model.lm_head.weight, batch["labels"][:, 1:].reshape(-1))[0]
    else:

        def loss_of(batch):
            return model(**batch).loss

    def step(batch, loss_of=loss_of):
        return train_step(optimizer, loss_of, batch)

    if head == "eager":
        run = step
    elif spec["compile"] == "model":
        compiled = torch.compile(loss_of)
        run = lambda batch: step(batch, compiled)  # noqa: E731
    else:
        run = torch.compile(step)
    generator = torch.Generator().manual_seed(1)
    vocab = MODELS[spec["model"]]["vocab_size"]
    rows = []
    counters.clear()
    gc_pause = gc_pauses()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for lengths in spec["lengths"]:
        longest = max(lengths)
        batch = padded_batch(lengths, vocab, generator, device)
        graphs_before = counters["stats"]["unique_graphs"]
        gc_before = gc_pause()
        start = time.perf_counter()
        loss = run(batch).item()
        wall = time.perf_counter() - start
        rows.append({"tokens": len(lengths) * longest, "wall_s": wall, "loss": loss,
                     "new_graphs": counters["stats"]["unique_graphs"] - graphs_before, "gc_s": gc_pause() - gc_before,
                     "package_counters": dict(counters["inductor_addmm_fix"])})  # fmt: skip
        print(STEP + json.dumps(rows[-1]), flush=True)
    steady = statistics.median(s["wall_s"] for s in rows[-10:])
    compile_s = sum(max(0.0, s["wall_s"] - steady) for s in rows if s["new_graphs"])
    graphs = counters["stats"]["unique_graphs"]
    replay = replayed_steps(run, spec["lengths"][-REPLAYED:], vocab, device)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan")
    return {**spec, "steps": rows, "torch": torch.__version__, "compile_s": compile_s,
            "graphs": graphs, "graph_breaks": sum(counters["graph_break"].values()),
            "limit_hits": limit_hits, "steady_ms": steady * 1e3, "peak_mib": peak,
            "replay_ms": statistics.median(replay) * 1e3, "replay_new_graphs": counters["stats"]["unique_graphs"] - graphs,
            "gc_ms": sum(s["gc_s"] for s in rows[-10:]) * 1e3,
            "features": os.environ.get("INDUCTOR_ADDMM_FIX", "all")}  # fmt: skip


#: the run's last batches that are run again (each ``REPLAYS`` times) after its steps
REPLAYED, REPLAYS = 10, 3


def replayed_steps(run, lengths: list, vocab: int, device: str) -> list[float]:
    """Each of ``lengths``' batches run ``REPLAYS`` more times, at lengths the run has
    already compiled for: the fastest of each, in seconds.  A step's time at a length seen
    before, against the run's steps, which each meet a new length."""
    import torch

    generator = torch.Generator().manual_seed(2)
    fastest = []
    for batch_lengths in lengths:
        batch = padded_batch(batch_lengths, vocab, generator, device)
        walls = []
        for _ in range(REPLAYS):
            start = time.perf_counter()
            run(batch).item()
            walls.append(time.perf_counter() - start)
        fastest.append(min(walls))
    return fastest


def gc_pauses():
    """A reader of the seconds Python's cyclic garbage collector has run since this call."""
    import gc

    total, started = [0.0], [0.0]

    def callback(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            total[0] += time.perf_counter() - started[0]

    gc.callbacks.append(callback)
    return lambda: total[0]


def print_run(result: dict, eager: dict | None, ce: dict | None) -> None:
    label = f"{result['model']:<15} {result['compile']:<6} {result['head']:<13}"
    if "error" in result:
        steps = result.get("steps", [])
        print(f"{label} failed: {result['error']} after {len(steps)} steps "
              f"({sum(s['wall_s'] for s in steps):.0f} s, {sum(s['new_graphs'] for s in steps)} graphs)", flush=True)
        return
    def ratio(other, key="steady_ms"):
        return f"{result[key] / other[key]:.3f}" if other and other.get(key) else "-"

    compile_ratio = f"{result['compile_s'] / ce['compile_s']:.2f}" if ce and ce.get("compile_s") else "-"
    print(f"{label} {result['compile_s']:>9.1f} {compile_ratio:>7} {result['graphs']:>6} {len(result['limit_hits']):>5} "
          f"{result['steady_ms']:>9.1f} {ratio(eager):>8} {matched(result, eager):>8} {ratio(ce):>8} "
          f"{result['replay_ms']:>9.1f} {ratio(eager, 'replay_ms'):>8} {result['gc_ms']:>6.0f} "
          f"{result['peak_mib']:>9.0f}", flush=True)  # fmt: skip


def matched(result: dict, other: dict | None, last: int = 20) -> str:
    """The median, over the last ``last`` steps, of this run's step over ``other``'s step
    of the same batch (both runs draw the same lengths): steadier than the ratio of two
    medians when step times follow the lengths."""
    if not other or "error" in other or "error" in result or result is other:
        return "-"
    pairs = list(zip(result["steps"], other["steps"]))[-last:]
    if not pairs or any(a["tokens"] != b["tokens"] for a, b in pairs):
        return "-"
    return f"{statistics.median(a['wall_s'] / b['wall_s'] for a, b in pairs):.3f}"


def run_mode(args) -> None:
    lengths = run_lengths(args.steps, args.batch, *map(int, args.run_lengths.split("-")))
    print(f"steps {args.steps}, batch {args.batch}, lengths uniform {args.run_lengths} (seeded), right padding", flush=True)
    print(f"{'model':<15} {'graph':<6} {'head':<13} {'compile s':>9} {'/ ce':>7} {'graphs':>6} {'limit':>5} "
          f"{'step ms':>9} {'/ eager':>8} {'matched':>8} {'/ ce':>8} {'replay ms':>9} {'/ eager':>8} {'gc ms':>6} "
          f"{'peak MiB':>9}", flush=True)  # fmt: skip
    results = []
    for model in args.models.split(","):
        eager = None  # compiles nothing: one run serves every --compile of the model
        for graph in args.compile.split(","):
            done = {}
            for head in args.heads.split(","):
                spec = {"model": model, "head": head, "compile": graph, "lengths": lengths, "device": args.device}
                env = dict(os.environ)
                if RUN_HEADS[head]:
                    env["INDUCTOR_ADDMM_FIX_LIGER_HEAD"] = RUN_HEADS[head]
                if head in PACKAGE_OFF:
                    env["INDUCTOR_ADDMM_FIX"] = "0"
                if head == "eager" and eager is not None:
                    done[head] = result = dict(eager, compile=graph)
                else:
                    done[head] = result = child(spec, env, args.timeout, "--one-run")
                    results.append(result)
                    eager = result if head == "eager" else eager
                print_run(result, done.get("eager"), done.get("ce"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def child(spec: dict, env: dict, timeout: float, flag: str) -> dict:
    """One run in a fresh interpreter with empty Inductor and Triton caches."""
    with tempfile.TemporaryDirectory(prefix="compile-time-") as caches:
        env = dict(env, TORCHINDUCTOR_CACHE_DIR=f"{caches}/inductor", TRITON_CACHE_DIR=f"{caches}/triton")
        try:
            done = subprocess.run([sys.executable, __file__, flag, json.dumps(spec)], env=env,
                                  capture_output=True, text=True, timeout=timeout)  # fmt: skip
            if done.returncode:
                raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
            return json.loads(done.stdout.strip().splitlines()[-1])
        except subprocess.TimeoutExpired as stopped:
            return {**spec, "error": f"over {timeout:.0f} s", "steps": steps_printed(stopped.stdout)}
        except Exception as error:  # one run failing leaves the others' rows
            return {**spec, "error": f"{type(error).__name__}: {error}"}


# ---------------------------------------------------------------- the table
STEP = "# step "


def steps_printed(stdout) -> list[dict]:
    """The steps a child printed (also from a child stopped by the timeout, whose output
    ``subprocess`` returns as bytes)."""
    if isinstance(stdout, bytes):
        stdout = stdout.decode(errors="replace")
    return [json.loads(line[len(STEP):]) for line in (stdout or "").splitlines() if line.startswith(STEP)]


def summarize(result: dict) -> dict:
    steps = result["steps"]
    steady = [s["wall_s"] for s in steps if s["new_graphs"] == 0] or [min(s["wall_s"] for s in steps)]
    base = statistics.median(steady)
    compiles = [s for s in steps if s["new_graphs"] > 0]
    first = compiles[0]["wall_s"] - base if compiles and compiles[0] is steps[0] else 0.0
    recompiles = [s["wall_s"] - base for s in compiles if s is not steps[0]]
    top = [(label, steps[0]["timers_s"][name]) for name, label in PHASES.items() if name in steps[0]["timers_s"]]
    return {
        "first_s": first, "recompiles_s": recompiles, "graphs": steps[-1]["graphs"],
        "graphs_per_step": [s["graphs"] for s in steps], "graph_breaks": steps[-1]["graph_breaks"],
        "chunks_per_step": [s["liger_chunks"] for s in steps],
        "step_ms": base * 1e3, "first_compile_timers": top,
    }  # fmt: skip


def print_row(result: dict) -> None:
    label = f"{result['model']:<15} {result['head']:<12} {result['shapes']:<9}"
    if result.get("features", "all") != "all":
        label += f" (INDUCTOR_ADDMM_FIX={result['features']})"
    if "error" in result:
        done = ", ".join(f"{s['length']}: {s['wall_s']:.1f}s, {s['new_graphs']} new graphs, {s['liger_chunks']} chunks" for s in result.get("steps", []))
        print(f"{label} failed: {result['error']}" + (f"; steps done: {done}" if done else ""), flush=True)
        return
    s = result["summary"]
    recompiles = " ".join(f"{r:.1f}" for r in s["recompiles_s"]) or "-"
    print(f"{label} {s['first_s']:>9.1f} {recompiles:>22} {s['graphs']:>6} {s['graph_breaks']:>6} {s['step_ms']:>9.1f}"
          f"  graphs/step {s['graphs_per_step']}, Liger's chunks/step {s['chunks_per_step']}", flush=True)  # fmt: skip
    print("    first compile, torch's timers: " + ", ".join(f"{k} {v:.1f}s" for k, v in s["first_compile_timers"]), flush=True)


def print_ratios(results: list[dict]) -> None:
    """Liger's first compile and recompiles over the ``ce`` head's, per model and shapes."""
    done = {(r["model"], r["head"], r["shapes"]): r["summary"] for r in results if "summary" in r}
    for (model, head, shapes), s in sorted(done.items()):
        ce = done.get((model, "ce", shapes))
        if head == "ce" or ce is None or ce["first_s"] <= 0:
            continue
        line = f"{model} {shapes}: {head} / ce first compile {s['first_s'] / ce['first_s']:.2f}x"
        if s["recompiles_s"] and ce["recompiles_s"]:
            line += f", recompiles {sum(s['recompiles_s']) / sum(ce['recompiles_s']):.2f}x"
        line += f", graphs {s['graphs']} vs {ce['graphs']}"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="small-h,llama3-8b-head")
    parser.add_argument("--heads", default=",".join(HEADS))
    parser.add_argument("--shapes", default="static,changing")
    parser.add_argument("--lengths", help="comma list: one run over these lengths instead of --shapes")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    parser.add_argument("--json", help="write every run's steps here")
    parser.add_argument("--run", action="store_true", help="a training run of --steps steps, lengths drawn per step")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--run-lengths", default="256-2048", help="--run: lengths drawn uniformly from LOW-HIGH")
    parser.add_argument("--compile", default="model,step", help="--run: compile the model's forward, or the whole step")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a run's spec, in the child
    parser.add_argument("--one-run", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return
    if args.one_run:
        print(json.dumps(training_run(json.loads(args.one_run))))
        return
    if args.run:
        if args.heads == ",".join(HEADS):
            args.heads = "eager,ce,liger,liger-opaque"
        run_mode(args)
        return
    shapes = {"custom": tuple(int(n) for n in args.lengths.split(","))} if args.lengths else {k: SHAPES[k] for k in args.shapes.split(",")}
    print(f"{'model':<15} {'head':<12} {'lengths':<9} {'first (s)':>9} {'recompiles (s)':>22} {'graphs':>6} {'breaks':>6} {'step (ms)':>9}", flush=True)
    results = []
    for model in args.models.split(","):
        for shape_name, lengths in shapes.items():
            for head in args.heads.split(","):
                spec = {"model": model, "head": head, "shapes": shape_name, "lengths": list(lengths), "device": args.device}
                result = child(spec, dict(os.environ), args.timeout, "--one")
                if "error" not in result:
                    try:
                        result["summary"] = summarize(result)
                    except Exception as error:  # one run failing leaves the others' rows
                        result = {**spec, "error": f"{type(error).__name__}: {error}"}
                results.append(result)
                print_row(result)
    print_ratios(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
