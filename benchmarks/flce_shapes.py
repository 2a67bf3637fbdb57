"""Eager vs compiled Liger FLCE on LLM heads, in static and dynamic graphs, in one run.

Real training changes shapes; after the first new row count Dynamo compiles the frame
again with symbolic sizes (automatic dynamic shapes) and every later step runs that
graph.  For each head and row count (BT) this times one forward+backward step of
``liger_fused_linear_cross_entropy`` (bf16, ~10% of the targets ``ignore_index``) in
each kind of graph, each against eager in alternation (median of --reps after warm-up):

    static     torch.compile, first and only call at BT
    automatic  torch.compile, a first call at another row count, then BT (the recompile
               has symbolic sizes: automatic dynamic shapes)
    dynamic    torch.compile(dynamic=True)
    dynamic-all  torch.compile(dynamic=True) with the weight a plain tensor: its sizes (V, H)
               are symbolic too; a model's ``lm_head.weight`` is a parameter, whose sizes
               Dynamo keeps static (``force_parameter_static_shapes``), so the other kinds
               pass the weight as an ``nn.Parameter``, as a model does
    marked     torch._dynamo.mark_dynamic on the token dimension of the input and target

    python benchmarks/flce_shapes.py                                  # every head at its default BT
    python benchmarks/flce_shapes.py --case llama3-8b:8192,32768 --graphs static automatic
    python benchmarks/flce_shapes.py --stock     # also the stock torch rows (the package off) where stock compiles
    python benchmarks/flce_shapes.py --also=-accumulate_kernel   # also rows with these features (a spec as install() takes)
    python benchmarks/flce_shapes.py --cublas-too   # also each compiled step with its accumulates on cuBLAS, not the Hopper kernel

Per row: eager and compiled ms and their ratio (with --cublas-too also the same compiled
graph with ``accumulate_kernel``'s steps sent to cuBLAS at run time, and the Hopper
kernel's launches per step); host ms (the Python time of one compiled
step, until it returns: guards, the wrapper's size arithmetic, launches; the step syncs
on Liger's ``.item()``, so this includes waiting for the forward's first kernels);
GPU kernel ms of one profiled compiled step (--profile); peak memory above the inputs
for each; the compile seconds of the first call at BT and the graphs compiled;
each one's error against a float64 reference.  Needs CUDA and liger-kernel.  Dynamo is
reset between graph kinds: Liger's forward is one code object, and automatic dynamic
shapes are recorded per code object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

import torch
from flce_bench import float64_reference, relative_errors, timed_interleaved

GiB = 1024**3
# name: (H, V, softcap); the LLM heads whose shapes users train.
HEADS = {
    "llama3-8b": (4096, 128256, None),
    "qwen2.5-7b": (3584, 152064, None),
    "gemma2-2b": (2304, 256000, 30.0),
    "qwen2.5-0.5b": (896, 151936, None),
}
DEFAULT_CASES = ["llama3-8b:8192", "qwen2.5-7b:16384", "gemma2-2b:8192", "qwen2.5-0.5b:4096,16384"]
GRAPHS = ("static", "automatic", "dynamic", "dynamic-all", "marked")
IGNORE = -100


def liger_chunk(h: int, v: int, rows: int) -> int:
    """Rows per chunk of Liger 0.8.5's FLCE loop: ``next_power_of_2(cdiv(rows, cdiv(V, H)))``,
    at most ``rows``."""
    return min(1 << (-(-rows // -(-v // h)) - 1).bit_length(), rows)


def parse_cases(specs) -> list[tuple[str, int]]:
    """[(head, BT)] of ``HEAD:BT[,BT...]`` specs; ValueError naming a spec that is not one."""
    cases = []
    for spec in specs:
        head, _, bts = spec.partition(":")
        try:
            if head not in HEADS or not bts:
                raise ValueError
            cases += [(head, int(bt)) for bt in bts.split(",")]
        except ValueError:
            raise ValueError(f"--case {spec}: expected HEAD:BT[,BT...] with HEAD one of {', '.join(HEADS)}") from None
    return cases


def inputs(bt: int, h: int, v: int, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(bt, h, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    w = (torch.randn(v, h, device="cuda", dtype=torch.bfloat16, generator=g) * h**-0.5).requires_grad_()
    t = torch.randint(v, (bt,), device="cuda", generator=g)
    t[torch.rand(bt, device="cuda", generator=g) < 0.1] = IGNORE
    return x, w, t


def loss_fn_for(accum, softcap):
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    def loss_fn(x, w, t):
        return liger_fused_linear_cross_entropy(x, w, t, ignore_index=IGNORE, softcap=softcap, accum_dtype=accum)

    return loss_fn


def compiled_for(graph: str, loss_fn, x, w, t, other_rows: int):
    """(compiled fn, the tensors it runs on, compile seconds of the first call at BT,
    graphs compiled).  The compile time counts the first call at BT only (for
    ``automatic``, the recompile after the call at ``other_rows``)."""
    from torch._dynamo.utils import counters

    from inductor_addmm_fix.dynamo import liger_head_op

    torch._dynamo.reset()
    liger_head_op.reset_tiers()
    counters["stats"].clear()
    fn = torch.compile(loss_fn, dynamic=True if graph.startswith("dynamic") else None)
    xs = x.detach().clone().requires_grad_()
    ws = w.detach().clone().requires_grad_() if graph == "dynamic-all" else torch.nn.Parameter(w.detach().clone())
    ts = t.clone()
    if graph == "marked":
        torch._dynamo.mark_dynamic(xs, 0)
        torch._dynamo.mark_dynamic(ts, 0)
    if graph == "automatic":
        xo, wo, to = inputs(other_rows, x.shape[1], w.shape[0], seed=1)
        fn(xo, torch.nn.Parameter(wo.detach()), to).backward()
        del xo, wo, to
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn(xs, ws, ts).backward()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    # INDUCTOR_ADDMM_FIX_LIGER_HEAD=auto: a static graph compiles Liger's loop once its
    # length has run PROMOTE_AFTER times; that compile counts, and the rows time what follows
    for _ in range(liger_head_op.PROMOTE_AFTER):
        before = counters["stats"]["unique_graphs"]
        start = time.perf_counter()
        fn(xs, ws, ts).backward()
        torch.cuda.synchronize()
        if counters["stats"]["unique_graphs"] > before:
            seconds += time.perf_counter() - start
    return fn, (xs, ws, ts), seconds, counters["stats"]["unique_graphs"]


def host_ms(fn, tensors, clear, reps: int = 5) -> float:
    """Median Python time of one step until it returns (GPU idle before each)."""
    times = []
    for _ in range(reps):
        clear()
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn(*tensors).backward()
        times.append((time.perf_counter() - start) * 1e3)
        torch.cuda.synchronize()
    times.sort()
    return times[len(times) // 2]


def kernel_ms(fn, tensors, clear, groups: dict | None = None) -> tuple[float, int]:
    """(GPU kernel ms, kernels launched) of one profiled step; ``groups`` (if given)
    gets ms and launches per kernel name, the trailing index of Inductor's names
    dropped (``triton_poi_fused_add_3`` -> ``triton_poi_fused_add``)."""
    import re

    from torch.profiler import ProfilerActivity, profile

    clear()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*tensors).backward()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if groups is not None:
        for e in events:
            name = re.sub(r"_\d+$", "", e.name[:80])
            ms, n = groups.get(name, (0.0, 0))
            groups[name] = (ms + e.device_time / 1e3, n + 1)
    return sum(e.device_time for e in events) / 1e3, len(events)


def blocks_at_peak(fn, tensors, clear, min_mib: float = 16.0) -> list:
    """[(where, MiB, count)] of the blocks alive at the step's memory peak, by the line
    that allocated them (a line of Inductor's generated wrapper for compiled code)."""
    from flce_profile import live_at_peak

    _, rows = live_at_peak(lambda: fn(*tensors).backward(), clear, min_mib)
    return [(where, size / 2**20, n) for where, size, n in rows]


def gemm_floor_ms(bt: int, h: int, v: int, reps: int = 10) -> float:
    """The step's GEMMs at cuBLAS's rate on their whole shapes: the logits ``x @ w.t()``,
    ``grad_x = g @ w`` and ``grad_w = g.t() @ x`` each over all BT rows at once (bf16,
    median of ``reps`` after warm-up, CUDA events): the floor a chunked step is held
    against.  Chunks of 1024 rows ran their GEMMs at about this rate
    (docs/gpu-results.md)."""
    from accumulate_k import median_ms

    x = torch.randn(bt, h, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(v, h, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(bt, v, device="cuda", dtype=torch.bfloat16)
    total = sum(median_ms(gemm, reps) for gemm in (lambda: x @ w.t(), lambda: g @ w, lambda: g.t() @ x))
    del x, w, g
    torch.cuda.empty_cache()
    return total


@contextlib.contextmanager
def accumulates_on_cublas():
    """The compiled graph's ``inductor_addmm_fix::accumulate_`` steps run cuBLAS (what the
    ``reinplace`` feature's lowering calls) instead of the Hopper kernel, and its merged
    pairs (``accumulate_pair_``) two cuBLAS steps each."""
    from inductor_addmm_fix.inductor import hopper_accumulate

    supports, supports_pair = hopper_accumulate.supports, hopper_accumulate.supports_pair
    hopper_accumulate.supports = hopper_accumulate.supports_pair = lambda *args, **kwargs: False
    try:
        yield
    finally:
        hopper_accumulate.supports, hopper_accumulate.supports_pair = supports, supports_pair


def kernel_launches(step) -> int:
    """The Hopper accumulate kernels' launches in one call of ``step`` (one per step or
    merged pair)."""
    from inductor_addmm_fix.inductor import hopper_accumulate

    before = sum(hopper_accumulate.runs.values())
    step()
    torch.cuda.synchronize()
    return sum(hopper_accumulate.runs.values()) - before


def row(head: str, bt: int, accum, graph: str, args, package: str = "on") -> dict:
    h, v, softcap = HEADS[head]
    x, w, t = inputs(bt, h, v, seed=0)
    loss_fn = loss_fn_for(accum, softcap)
    fn, (xs, ws, ts), seconds, graphs = compiled_for(graph, loss_fn, x, w, t, other_rows=bt * 3 // 4)

    def clear():
        for tensor in (x, w, xs, ws):
            tensor.grad = None

    steps = {"eager": lambda: loss_fn(x, w, t).backward(), "compiled": lambda: fn(xs, ws, ts).backward()}
    launches = kernel_launches(steps["compiled"])
    if args.cublas_too:
        def on_cublas():
            with accumulates_on_cublas():
                fn(xs, ws, ts).backward()

        steps["compiled, cuBLAS accumulates"] = on_cublas
    timed = timed_interleaved(steps, warmup=args.warmup, reps=args.reps, setup=clear)
    results = {}
    for label, call, tensors in (("eager", loss_fn, (x, w, t)), ("compiled", fn, (xs, ws, ts))):
        clear()
        loss = call(*tensors)
        loss.backward()
        results[label] = (loss.detach().float(), tensors[0].grad.clone(), tensors[1].grad.clone())
    ref = float64_reference(x, w, t, softcap=softcap, ignore_index=IGNORE)
    errors = {label: relative_errors(results[label], ref) for label in results}
    del ref
    out = dict(
        head=head, bt=bt, h=h, v=v, softcap=softcap, accum="fp32" if accum else "None", graph=graph,
        package=package,
        eager_ms=timed["eager"][0], compiled_ms=timed["compiled"][0], ratio=timed["compiled"][0] / timed["eager"][0],
        eager_gib=timed["eager"][1] / GiB, compiled_gib=timed["compiled"][1] / GiB,
        memory_bound_gib=(timed["eager"][1] + max(0.05 * timed["eager"][1], 64 * 1024**2)) / GiB,
        compile_s=seconds, graphs=graphs, host_ms=host_ms(fn, (xs, ws, ts), clear), kernel_launches=launches,
        eager_error=errors["eager"], compiled_error=errors["compiled"],
        grads_within_eager=all(errors["compiled"][k] <= 1.05 * errors["eager"][k] + 1e-7 for k in ("grad_x", "grad_w")),
    )
    if args.cublas_too:
        out["cublas_accumulates_ms"] = timed["compiled, cuBLAS accumulates"][0]
        out["cublas_accumulates_gib"] = timed["compiled, cuBLAS accumulates"][1] / GiB
    if args.profile:
        groups: dict = {}
        out["kernel_ms"], out["kernels"] = kernel_ms(fn, (xs, ws, ts), clear, groups)
        eager_groups: dict = {}
        out["eager_kernel_ms"], out["eager_kernels"] = kernel_ms(loss_fn, (x, w, t), clear, eager_groups)
        if args.kernels:
            out["kernel_groups"] = sorted(([k, ms, n] for k, (ms, n) in groups.items()), key=lambda r: -r[1])
            out["eager_kernel_groups"] = sorted(([k, ms, n] for k, (ms, n) in eager_groups.items()), key=lambda r: -r[1])
            out["blocks_at_peak"] = blocks_at_peak(fn, (xs, ws, ts), clear)
    del fn, x, w, t, xs, ws, ts, results
    if args.floor:
        out["floor_ms"] = gemm_floor_ms(bt, h, v)
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return out


def print_table(rows: list) -> None:
    print(
        "| head | BT | accum | graph | package | eager ms | compiled ms | ratio | vs static | host ms | GPU kernel ms (eager / compiled) "
        "| extra GiB eager / compiled (bound) | compile s | graphs | grad error vs float64 eager / compiled (x; w) "
        "| Hopper kernel launches | compiled, cuBLAS accumulates ms (ratio) | GEMM floor ms (compiled / floor) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    static = {(r["head"], r["bt"], r["accum"], r["package"]): r["compiled_ms"] for r in rows if r["graph"] == "static"}
    for r in rows:
        base = static.get((r["head"], r["bt"], r["accum"], r["package"]))
        vs = f"{r['compiled_ms'] / base:.3f}" if base else "-"
        kern = f"{r['eager_kernel_ms']:.1f} / {r['kernel_ms']:.1f}" if "kernel_ms" in r else "-"
        cublas = (f"{r['cublas_accumulates_ms']:.2f} ({r['cublas_accumulates_ms'] / r['eager_ms']:.3f})"
                  if "cublas_accumulates_ms" in r else "-")
        floor = f"{r['floor_ms']:.2f} ({r['compiled_ms'] / r['floor_ms']:.3f})" if "floor_ms" in r else "-"
        e, c = r["eager_error"], r["compiled_error"]
        print(
            f"| {r['head']} | {r['bt']} | {r['accum']} | {r['graph']} | {r['package']} | {r['eager_ms']:.2f} | "
            f"{r['compiled_ms']:.2f} | {r['ratio']:.3f} | {vs} | {r['host_ms']:.1f} | {kern} | "
            f"{r['eager_gib']:.3f} / {r['compiled_gib']:.3f} ({r['memory_bound_gib']:.3f}) | {r['compile_s']:.1f} | "
            f"{r['graphs']} | {e['grad_x']:.1e}; {e['grad_w']:.1e} / {c['grad_x']:.1e}; {c['grad_w']:.1e} | "
            f"{r.get('kernel_launches', '-')} | {cublas} | {floor} |"
        )


def print_group_differences(title: str, after: list, before: list, top: int) -> None:
    """The kernel groups ([name, ms, launches]) whose GPU time differs most between two
    profiled steps, ``after`` minus ``before``."""
    a = {k: (ms, n) for k, ms, n in before}
    b = {k: (ms, n) for k, ms, n in after}
    diff = sorted(((b.get(k, (0, 0))[0] - a.get(k, (0, 0))[0], k) for k in set(a) | set(b)), key=lambda d: -abs(d[0]))
    print(f"\n## {title}")
    for d, k in diff[:top]:
        print(f"{d:+9.3f}  {b.get(k, (0, 0))[1]:5d} vs {a.get(k, (0, 0))[1]:5d}  {k}")


def print_kernel_differences(rows: list, top: int = 12) -> None:
    """Per row with --kernels, the kernel groups whose GPU time differs most: the static
    graph's against eager's, every other graph's against the static graph's of the same
    head, BT and accum."""
    static = {(r["head"], r["bt"], r["accum"], r["package"]): r for r in rows if r["graph"] == "static" and "kernel_groups" in r}
    for r in rows:
        if "kernel_groups" not in r:
            continue
        what = f"{r['head']} BT={r['bt']} accum={r['accum']}"
        if r["graph"] == "static":
            print_group_differences(
                f"{what}: static compiled - eager, GPU ms per kernel group (total {r['kernel_ms'] - r['eager_kernel_ms']:+.2f} ms; "
                f"launches {r['kernels']} vs {r['eager_kernels']})", r["kernel_groups"], r["eager_kernel_groups"], top)
            continue
        base = static.get((r["head"], r["bt"], r["accum"], r["package"]))
        if base is None:
            continue
        print_group_differences(
            f"{what}: {r['graph']} - static, GPU ms per kernel group (total {r['kernel_ms'] - base['kernel_ms']:+.2f} ms; "
            f"launches {r['kernels']} vs {base['kernels']})", r["kernel_groups"], base["kernel_groups"], top)
        for label, row in (("static", base), (r["graph"], r)):
            print(f"# blocks alive at the peak, {label}: " + "; ".join(f"{w} {mib:.0f} MiB x{n}" for w, mib, n in row.get("blocks_at_peak", [])[:8]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", action="append", help=f"HEAD:BT[,BT...] (heads: {', '.join(HEADS)}); default: {' '.join(DEFAULT_CASES)}")
    p.add_argument("--graphs", nargs="+", choices=GRAPHS, default=list(GRAPHS))
    p.add_argument("--accum", nargs="+", choices=["fp32", "None"], default=["fp32", "None"])
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--profile", action="store_true", help="GPU kernel time of one profiled step per row")
    p.add_argument("--kernels", action="store_true", help="with --profile: GPU time per kernel and the blocks alive at the memory peak, "
                   "compared with the static graph's")
    p.add_argument("--stock", action="store_true", help="also each accum=None row with the package off (stock torch)")
    p.add_argument("--also", action="append", default=[], metavar="SPEC",
                   help="also each static and automatic row with these features (install(features=SPEC)), e.g. -accumulate_kernel")
    p.add_argument("--cublas-too", action="store_true",
                   help="also time each compiled step with its accumulates on cuBLAS instead of the Hopper kernel (same graph)")
    p.add_argument("--pair-budget-mib", type=float, metavar="MIB",
                   help="the extra memory a merged pair may take, as INDUCTOR_ADDMM_FIX_PAIR_BUDGET_MIB sets it "
                   "(default: the package's bound, max(64 MiB, 5%% of the accumulator))")
    p.add_argument("--floor", action="store_true",
                   help="also the step's GEMMs on cuBLAS over all BT rows at once (the floor a chunked step is held against), "
                   "and compiled / floor")
    p.add_argument("--json", help="write every row here, as each completes")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 2
    import inductor_addmm_fix

    try:
        cases = parse_cases(args.case or DEFAULT_CASES)
    except ValueError as error:
        p.error(str(error))
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, inductor_addmm_fix {inductor_addmm_fix.__version__}", flush=True)
    if args.pair_budget_mib is not None:
        import os

        from inductor_addmm_fix.settings import PAIR_BUDGET

        os.environ[PAIR_BUDGET.variable] = str(args.pair_budget_mib)
        print(f"# {PAIR_BUDGET.variable}={args.pair_budget_mib}", flush=True)
    rows = []
    for head, bt in cases:
        for accum_name in args.accum:
            accum = torch.float32 if accum_name == "fp32" else None
            runs = [(graph, "on") for graph in args.graphs]
            for spec in args.also:
                runs += [(graph, spec) for graph in args.graphs if graph in ("static", "automatic")]
            if args.stock and accum is None:
                runs += [(graph, "off (stock)") for graph in args.graphs if graph in ("static", "automatic")]
            for graph, package in runs:
                if package == "off (stock)":
                    inductor_addmm_fix.uninstall()
                elif package != "on":
                    inductor_addmm_fix.install(package)
                try:
                    rows.append(row(head, bt, accum, graph, args, package))
                except Exception as error:  # a row that fails is reported, the others run
                    print(f"# {head} BT={bt} accum={accum_name} {graph} ({package}): {type(error).__name__}: {str(error)[:300]}", flush=True)
                    torch._dynamo.reset()
                    torch.cuda.empty_cache()
                    continue
                finally:
                    if package != "on":
                        inductor_addmm_fix.install()
                print("# row:", json.dumps(rows[-1]), flush=True)
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
    print_table(rows)
    print_kernel_differences(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
