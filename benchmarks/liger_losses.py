"""Eager vs torch.compile (with inductor_addmm_fix) for Liger's fused linear losses: FLCE
across its options, JSD and KL divergence, on LLM heads, in static and automatic graphs.

Each row is one loss configuration x one head x one graph kind, on fresh random bf16
inputs (seeded per row; ~10% of FLCE's targets and of JSD's ``shift_labels``, where
given, ``ignore_index``).  One forward+backward step runs eager and compiled in
alternation (``flce_bench.timed_interleaved``: median of --reps after --warmup); per row:
eager and compiled ms and their ratio, the peak memory above the inputs of each (MiB) and
the difference, the compile seconds of the first compiled call at BT (and of the calls
after it until the graphs settle: the package compiles a static FLCE graph with its opaque
op first, with Liger's loop after a few steps of one length), the package's counters that
fired meanwhile (``counters["inductor_addmm_fix"]``: a summary in the table, every name
in the JSON), whether the compiled loss has eager's dtype, whether
compiled equals eager bit for bit (loss and gradients; "extras": z_loss, token accuracy,
predicted tokens), and the relative error of eager and of compiled against a float64
reference written from Liger 0.8.5's definitions (loss, grad of the student input, grad
of the student weight; every row of every BT, chunked).

    static     torch.compile, called at BT only
    automatic  torch.compile, first called at BT*3//4, then at BT (the recompile has symbolic sizes)

Losses (``liger_kernel.transformers.functional``; ``--losses`` takes a family or a row name):
    flce:*  liger_fused_linear_cross_entropy, accum_dtype=fp32, one option at a time
    jsd:*   liger_fused_linear_jsd, accum fp32 / None; beta 0, 0.5, 1 (T 1), T 2, shift_labels
    kl:*    liger_fused_linear_kl_div (batchmean, target probabilities), accum fp32 / None
Heads: llama3-8b (H 4096, V 128256), qwen2.5-0.5b (896, 151936); JSD's student <- teacher
pairs: llama (2048 <- 4096, V 128256), qwen (896 <- 3584, V 151936).  Dynamo and the
package's state of Liger's head are reset between rows; a row that raises is reported and
the run goes on.

    python benchmarks/liger_losses.py --list [--quick]   # the rows and a rough time estimate (no GPU needed)
    python benchmarks/liger_losses.py --quick --json out.json --time-limit 540
    python benchmarks/liger_losses.py --losses flce:plain jsd --heads llama3-8b --graphs static
    python benchmarks/liger_losses.py --losses jsd kl --inline-dispatch   # what compiling their loops would give
    python benchmarks/liger_losses.py --losses kl:fp32 --heads llama3-8b --graphs static --profile 15
    python benchmarks/liger_losses.py --losses jsd kl --graphs static --head-settings auto,loop

--inline-dispatch measures a route, not the package: Liger's JSD and KL-div call their
per-chunk kernel through ``liger_kernel.backends.dispatch``, which is
``torch.compiler.disable``d, so Dynamo breaks the graph inside their chunk loops and runs
the loops eagerly.  With the flag, those two modules' ``dispatch`` is, for eager and
compiled alike, a plain call of the implementation Liger's dispatcher resolves for the
GPU (resolved once, before tracing), so Dynamo traces the whole loop.

Needs CUDA and liger-kernel (imported only by the rows).  --time-limit S starts no row
whose estimated time would end past S seconds after the start (the table is still printed).
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import sys
import time
import traceback
import zlib

import torch
from flce_bench import device_sort_key, profiled, relative_errors, timed_interleaved

MiB = 1024**2
IGNORE = -100
DEVICE = "cuda"
HEADS = {"llama3-8b": (4096, 128256), "qwen2.5-0.5b": (896, 151936)}  # name: (H, V)
JSD_PAIRS = {"llama3-8b": (2048, 4096, 128256), "qwen2.5-0.5b": (896, 3584, 151936)}  # student H, teacher H, V
GRAPHS = ("static", "automatic")
FLCE_OPTIONS = {  # name: keyword arguments (bias / ce_weight: tensors made per row)
    "plain": {}, "label_smoothing": {"label_smoothing": 0.1},
    "z_loss": {"lse_square_scale": 1e-4, "return_z_loss": True},
    "sum": {"reduction": "sum"}, "none": {"reduction": "none"}, "bias": {"bias": True},
    "ce_weight": {"ce_weight": True}, "softcap": {"softcap": 30.0}, "token_scaling": {"use_token_scaling": True},
    "token_accuracy": {"return_token_accuracy": True}, "predicted_tokens": {"return_predicted_tokens": True},
    "chunk_mem_const4": {"chunk_mem_const": 4},
}  # fmt: skip
JSD_OPTIONS = {"beta0": {"beta": 0.0}, "beta0.5": {}, "beta1": {"beta": 1.0}, "T2": {"temperature": 2.0}, "labels": {"labels": True}}
CONFIGS = {f"flce:{k}": ("flce", dict(v, accum="fp32")) for k, v in FLCE_OPTIONS.items()}
CONFIGS |= {f"jsd:{a}-{k}": ("jsd", dict(v, accum=a)) for a in ("fp32", "None") for k, v in JSD_OPTIONS.items()}
CONFIGS |= {f"kl:{a}": ("kl", {"accum": a}) for a in ("fp32", "None")}
# --quick: (config, head or None for both, graphs); about 8 minutes on an H100 by estimate().
QUICK = [(f"flce:{k}", "llama3-8b", ("static",)) for k in ("plain", "label_smoothing", "z_loss", "none", "softcap")]
QUICK += [(f"flce:{k}", "qwen2.5-0.5b", ("static",)) for k in ("plain", "z_loss", "none")] + [("flce:plain", None, ("automatic",))]
QUICK += [("jsd:fp32-beta0.5", "llama3-8b", GRAPHS), ("jsd:None-beta0.5", "llama3-8b", ("static",))]
QUICK += [("kl:fp32", None, ("static",)), ("kl:fp32", "llama3-8b", ("automatic",)), ("kl:None", "llama3-8b", ("static",))]


def liger_head_op():
    """The package's module that compiles a static FLCE graph with its opaque op first and with Liger's loop
    after ``PROMOTE_AFTER`` runs of one length (``reset_tiers()``: as in a fresh process); None where it has none."""
    try:
        from inductor_addmm_fix.dynamo import liger_head_op

        return liger_head_op
    except ImportError:
        return None


# ---- float64 references (Liger 0.8.5's definitions), autograd chunk by chunk ----

def chunked_float64(x, w, row_losses, rows: int, per_row: bool = False):
    """(loss, grad_x, grad_w) in float64 of ``sum(row_losses(x[rows] @ w.t(), rows))`` over chunks of
    ``rows`` rows (each chunk's graph freed by its backward); ``per_row``: the loss per row."""
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    pieces = []
    for start in range(0, x.shape[0], rows):
        part = slice(start, start + rows)
        losses = row_losses(x64[part] @ w64.t(), part)
        losses.sum().backward()
        pieces.append(losses.detach())
    losses = torch.cat(pieces)
    return (losses if per_row else losses.sum()), x64.grad, w64.grad


def flce_reference(x, w, t, bias=None, ce_weight=None, *, ignore_index=IGNORE, label_smoothing=0.0, lse_square_scale=0.0,
                   reduction="mean", softcap=None, use_token_scaling=False, rows=1024):
    """Liger's FLCE (ops/cross_entropy.py): per row ``w_y (lse - z_y)``, with label smoothing ``(1-ls)`` that
    plus ``ls/V * sum_i w_i (lse - z_i)``, over ``sum w_y`` (mean), plus ``lse_square_scale * lse^2`` (over n
    for mean); z softcapped; token scaling multiplies a row by softmax(z)[y], detached; ignored rows 0."""
    keep, y = t != ignore_index, t.clamp(min=0)
    n = keep.sum().double()
    cw = ce_weight.double() if ce_weight is not None else None
    denom = cw[y][keep].sum() if cw is not None else n
    b64, v = (bias.detach().double() if bias is not None else None), w.shape[0]

    def row_losses(z, part):
        z = z + b64 if b64 is not None else z
        z = softcap * torch.tanh(z / softcap) if softcap is not None else z
        lse, yy = z.logsumexp(-1), y[part, None]
        ce = lse - z.gather(1, yy)[:, 0]
        if cw is not None:
            ce = cw[y[part]] * ce
        if label_smoothing > 0:
            nll = lse[:, None] - z
            ce = (1 - label_smoothing) * ce + (label_smoothing / v) * (nll * cw if cw is not None else nll).sum(-1)
        zl = lse_square_scale * lse * lse
        loss = ce / denom + zl / n if reduction == "mean" else ce + zl
        if use_token_scaling:
            loss = loss * torch.softmax(z.detach(), -1).gather(1, yy)[:, 0]
        return loss * keep[part]

    return chunked_float64(x, w, row_losses, rows, per_row=reduction == "none")


def jsd_reference(xs, ws, xt, wt, shift_labels=None, *, beta=0.5, ignore_index=IGNORE, temperature=1.0, rows=512):
    """Liger's generalized JSD (ops/jsd.py) of student log-probs Q = log_softmax(xs ws^T / T) and teacher
    P = log_softmax(xt wt^T / T): per row ``sum(P (P - Q))`` at beta 0 (forward KL), ``sum(Q (Q - P))`` at
    beta 1, else ``sum(beta P (P - M) + (1-beta) Q (Q - M))``, M = log(beta e^P + (1-beta) e^Q); over the
    rows whose label is not ignore_index (all rows without labels)."""
    keep = shift_labels != ignore_index if shift_labels is not None else torch.ones(xs.shape[0], dtype=torch.bool, device=xs.device)
    n, xt64, wt64 = keep.sum().double(), xt.detach().double(), wt.detach().double()

    def row_losses(z, part):
        with torch.no_grad():
            p = torch.log_softmax(xt64[part] @ wt64.t() / temperature, -1)
        q = torch.log_softmax(z / temperature, -1)
        if beta == 0:
            loss = (p.exp() * (p - q)).sum(-1)
        elif beta == 1:
            loss = (q.exp() * (q - p)).sum(-1)
        else:
            m = torch.logaddexp(p + math.log(beta), q + math.log1p(-beta))
            loss = (beta * p.exp() * (p - m) + (1 - beta) * q.exp() * (q - m)).sum(-1)
        return loss * keep[part] / n

    return chunked_float64(xs, ws, row_losses, rows)


def kl_reference(x, w, target, shift_labels=None, *, reduction="batchmean", ignore_index=IGNORE, temperature=1.0, eps=1e-10, rows=1024):
    """Liger's fused KL (ops/fused_linear_kl_div.py): per row ``sum(q (log max(q, eps) - log_softmax(z / T)))``,
    q the target probabilities, times 1/n (batchmean), 1/(n V) (mean) or 1 (sum); rows labelled ignore_index 0."""
    keep = shift_labels != ignore_index if shift_labels is not None else torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
    n = keep.sum().double()
    scale = 0.0 if n == 0 else {"batchmean": 1 / n, "mean": 1 / (n * target.shape[1]), "sum": 1.0}[reduction]

    def row_losses(z, part):
        q = target[part].double()
        return (q * (q.clamp(min=eps).log() - torch.log_softmax(z / temperature, -1))).sum(-1) * keep[part] * scale

    return chunked_float64(x, w, row_losses, rows)


# ---- rows ----

def rows_for(args) -> list[tuple[str, str, str]]:
    """[(config, head, graph)] selected by --losses, --heads, --graphs (and --quick)."""
    pick = lambda name: not args.losses or any(name == s or name.split(":")[0] == s for s in args.losses)  # noqa: E731
    if args.quick:
        wanted = [(c, h, g) for c, head, graphs in QUICK for h in HEADS if head in (None, h) for g in graphs]
    else:
        wanted = [(c, h, g) for c in CONFIGS for h in HEADS for g in GRAPHS]
    rows = [(c, h, g) for c, h, g in wanted if pick(c) and h in args.heads and g in args.graphs]
    return sorted(rows, key=lambda r: (list(HEADS).index(r[1]), list(CONFIGS).index(r[0]), GRAPHS.index(r[2])))


def chunks(bt: int, h: int, v: int, const: int) -> int:
    """Liger 0.8.5's chunk count: chunks of ``next_power_of_2(cdiv(BT, cdiv(V, const * H)))`` rows."""
    from inductor_addmm_fix.dynamo.liger_head import liger_chunks

    return liger_chunks((bt, h), (v, h), const)


def estimate(config: str, head: str, graph: str, bt: int, warmup: int, reps: int) -> float:
    """Rough seconds of one row on an H100 under the default setting: compiles (a traced chunk loop about 6 s +
    0.6 s a chunk; a loss as the package's opaque op 8 s: where its loop has more than ``LOOP_MAX_CHUNKS`` chunks or an
    option in ``LOOP_BREAKING_OPTIONS`` (FLCE),
    JSD's and KL-div's outside ``LOOP_CHUNKS`` or with labels, where sizes are symbolic, and before a static graph's promotion to the loop), the timed steps (GEMMs at 300
    TFLOP/s plus 30 bytes of traffic per logit at 3 TB/s), the float64 reference (40 TFLOP/s) and 4 s of set-up."""
    family, opts = CONFIGS[config]
    (hs, ht, v), h = (JSD_PAIRS[head], JSD_PAIRS[head][0]) if family == "jsd" else ((HEADS[head][0], 0, HEADS[head][1]), HEADS[head][0])
    const = {"flce": opts.get("chunk_mem_const", 1), "jsd": 1, "kl": 16}[family]
    from inductor_addmm_fix.dynamo.liger_distill_head import LOOP_CHUNKS
    from inductor_addmm_fix.dynamo.liger_head import LOOP_BREAKING_OPTIONS, LOOP_MAX_CHUNKS

    def as_op(n: int, symbolic: bool) -> bool:  # the default setting's tiers (dynamo/liger_head.py, liger_distill_head.py)
        if family == "flce":
            return symbolic or n > LOOP_MAX_CHUNKS or any(opts.get(name) for name in LOOP_BREAKING_OPTIONS)
        return symbolic or n not in LOOP_CHUNKS or bool(opts.get("labels"))

    promotes = getattr(liger_head_op(), "PROMOTE_AFTER", 0) > 0 and not as_op(chunks(bt, h, v, const), False)

    def compile_s(rows: int, symbolic: bool) -> float:
        n = chunks(rows, h, v, const)
        if as_op(n, symbolic):
            return 8.0
        return (10 + 1.0 * n) if symbolic else (6 + 0.6 * n) + (8.0 if promotes else 0.0)

    first = 8.0 if promotes else compile_s(bt * 3 // 4, False)
    compile_total = compile_s(bt, False) if graph == "static" else first + compile_s(bt, True)
    flops = 2 * bt * v * (3 * hs + ht)
    step = flops / 300e12 + 30 * bt * v / 3e12
    return compile_total + 2 * (warmup + reps + 8) * step + 1.5 * flops / 40e12 + 4


def make_case(config: str, head: str, bt: int, seed: int):
    """(the loss call's tensors, the tensors whose .grad is read (student input, student weight) and cleared,
    reference() -> float64 (loss, grad_x, grad_w)) on fresh random inputs."""
    family, opts = CONFIGS[config]
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    randn = lambda *shape, scale=1.0: torch.randn(*shape, device=DEVICE, generator=g).mul_(scale).bfloat16()  # noqa: E731

    def labels(v):
        t = torch.randint(v, (bt,), device=DEVICE, generator=g)
        t[torch.rand(bt, device=DEVICE, generator=g) < 0.1] = IGNORE
        return t

    if family == "jsd":
        hs, ht, v = JSD_PAIRS[head]
        xs, ws = randn(bt, hs).requires_grad_(), torch.nn.Parameter(randn(v, hs, scale=hs**-0.5))
        xt, wt, t = randn(bt, ht), randn(v, ht, scale=ht**-0.5), labels(v) if opts.get("labels") else None
        ref = lambda: jsd_reference(xs, ws, xt, wt, t, beta=opts.get("beta", 0.5), temperature=opts.get("temperature", 1.0))  # noqa: E731
        return (xs, ws, xt, wt, t), (xs, ws), ref
    h, v = HEADS[head]
    x, w = randn(bt, h).requires_grad_(), torch.nn.Parameter(randn(v, h, scale=h**-0.5))
    if family == "kl":
        q = torch.cat([torch.softmax(torch.randn(min(1024, bt - s), v, device=DEVICE, generator=g), -1).bfloat16() for s in range(0, bt, 1024)])
        return (x, w, q), (x, w), lambda: kl_reference(x, w, q)
    t = labels(v)
    b = randn(v, scale=0.02).requires_grad_() if opts.get("bias") else None
    cw = torch.rand(v, device=DEVICE, generator=g) + 0.5 if opts.get("ce_weight") else None
    keys = ("label_smoothing", "lse_square_scale", "reduction", "softcap", "use_token_scaling")
    ref = lambda: flce_reference(x, w, t, b, cw, **{k: opts[k] for k in keys if k in opts})  # noqa: E731
    return (x, w, t, b, cw), (x, w) + ((b,) if b is not None else ()), ref


def loss_call(config: str):
    """fn(*tensors) -> tuple of the loss and its extra outputs (z_loss, token accuracy, predicted tokens),
    or a string naming what this Liger lacks."""
    import inspect

    from liger_kernel.transformers import functional

    family, opts = CONFIGS[config]
    accum = torch.float32 if opts["accum"] == "fp32" else None
    name = {"flce": "liger_fused_linear_cross_entropy", "jsd": "liger_fused_linear_jsd", "kl": "liger_fused_linear_kl_div"}[family]
    f = getattr(functional, name, None)
    if f is None:
        return name
    wanted = {"flce": [k for k in opts if k not in ("accum", "bias")], "jsd": ["temperature"], "kl": []}[family] + ["accum_dtype"]
    missing = [k for k in wanted if k not in inspect.signature(f).parameters]
    if missing:
        return f"{name}({', '.join(k + '=' for k in missing)})"
    if family == "jsd":
        beta, temperature = opts.get("beta", 0.5), opts.get("temperature", 1.0)
        return lambda xs, ws, xt, wt, t: (f(xs, ws, xt, wt, shift_labels=t, jsd_beta=beta, ignore_index=IGNORE, temperature=temperature, accum_dtype=accum),)
    if family == "kl":
        return lambda x, w, q: (f(x, w, q, reduction="batchmean", accum_dtype=accum),)
    kwargs = {k: val for k, val in opts.items() if k not in ("accum", "bias", "ce_weight")}

    def call(x, w, t, b, cw):
        out = f(x, w, t, bias=b, ce_weight=cw, ignore_index=IGNORE, accum_dtype=accum, **kwargs)
        if isinstance(out, torch.Tensor):
            return (out,)
        return tuple(o for o in (out.loss, out.z_loss, out.token_accuracy, out.predicted_tokens) if o is not None)

    return call


class inlined_dispatch:
    """Within: Liger's JSD and KL-div ops modules call the implementation that Liger's
    ``dispatch`` resolves for this GPU directly, which Dynamo can trace (``--inline-dispatch``)."""

    MODULES = {"jsd": ("liger_kernel.ops.fused_linear_jsd", "jsd_loss_and_grad"),
               "kl": ("liger_kernel.ops.fused_linear_kl_div", "kl_loss_and_grad")}  # fmt: skip

    def __init__(self, family: str):
        self.entry = self.MODULES.get(family)

    def __enter__(self):
        if self.entry:
            import importlib

            from liger_kernel.backends.dispatch import resolve_impl

            self.module = importlib.import_module(self.entry[0])
            self.saved = self.module.dispatch
            resolved = {self.entry[1]: resolve_impl(self.entry[1], requested=None, device=torch.device(DEVICE, torch.cuda.current_device()))}

            def dispatch(op_name, *args, impl=None, backend=None, **kwargs):
                assert impl is None and backend is None, "--inline-dispatch: only Liger's default implementation"
                return resolved[op_name].call(*args, **kwargs)

            self.module.dispatch = dispatch
        return self

    def __exit__(self, *exc):
        if self.entry:
            self.module.dispatch = self.saved


def run_row(config: str, head: str, graph: str, args) -> dict:
    if getattr(args, "inline_dispatch", False):
        with inlined_dispatch(CONFIGS[config][0]):
            return dict(_run_row(config, head, graph, args), dispatch="inlined")
    return _run_row(config, head, graph, args)


def _run_row(config: str, head: str, graph: str, args) -> dict:
    from torch._dynamo.utils import counters

    call = loss_call(config)
    if isinstance(call, str):
        return {"skipped": f"skipped: this Liger has no {call}"}
    seed = zlib.crc32(f"{config}/{head}/{graph}/{args.seed}".encode())
    tensors, grads, reference = make_case(config, head, args.bt, seed)

    def clear():
        for tensor in grads:
            tensor.grad = None

    def step(fn, on=tensors):
        out = fn(*on)
        (out[0].sum() if out[0].dim() else out[0]).backward()
        return out

    torch._dynamo.reset()
    getattr(liger_head_op(), "reset_tiers", lambda: None)()  # each row as in a fresh process, for Dynamo and the package
    promote_after = getattr(liger_head_op(), "PROMOTE_AFTER", 0)
    counters["stats"].clear()
    before = dict(counters["inductor_addmm_fix"])
    compiled, first_s = torch.compile(call), None
    if graph == "automatic":
        other, _, _ = make_case(config, head, args.bt * 3 // 4, seed + 1)
        start = time.perf_counter()
        step(compiled, other)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - start
        del other
    seconds = []
    for _ in range(promote_after + 2):  # the first call at BT, then until a static FLCE graph is promoted and settles
        clear()
        torch.cuda.synchronize()
        start = time.perf_counter()
        step(compiled)
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    fired = {k: v - before.get(k, 0) for k, v in counters["inductor_addmm_fix"].items() if v != before.get(k, 0)}
    graphs = counters["stats"]["unique_graphs"]
    timed = timed_interleaved({k: (lambda fn=fn: step(fn)) for k, fn in (("eager", call), ("compiled", compiled))},
                              warmup=args.warmup, reps=args.reps, setup=clear)
    timed_graphs = counters["stats"]["unique_graphs"] - graphs  # compiled while timed: the compile phase ended too soon
    results = {}
    for label, fn in (("eager", call), ("compiled", compiled)):
        clear()
        out = step(fn)
        results[label] = ([o.detach().clone() for o in out], [t.grad.clone() for t in grads[:2]])
    if getattr(args, "profile", False):  # where the time goes: GPU busy time against the step's, top kernels
        for label, fn in (("eager", call), ("compiled", compiled)):
            busy, events = profiled(lambda fn=fn: step(fn), steps=2, setup=clear)
            sort = "self_cpu_time_total" if getattr(args, "profile_sort", "device") == "cpu" else device_sort_key(events)
            print(f"# profile {config} {head} {graph} {label}: GPU busy {busy:.2f} ms per step "
                  f"(step {timed[label][0]:.2f} ms)\n{events.table(sort_by=sort, row_limit=args.profile)}")
    (eo, eg), (co, cg) = results["eager"], results["compiled"]
    ref = reference()
    errors = {k: relative_errors([o[0]] + g, ref) for k, (o, g) in results.items()}
    del ref
    (te, me), (tc, mc) = timed["eager"], timed["compiled"]
    return dict(
        eager_ms=te, compiled_ms=tc, ratio=tc / te, eager_mib=me / MiB, compiled_mib=mc / MiB, extra_mib=(mc - me) / MiB,
        compile_s=seconds[0], settle_s=sum(seconds[1:]), first_call_s=first_s, graphs=graphs,
        graphs_while_timed=timed_graphs, counters=fired,
        loss_dtype=str(co[0].dtype), dtype_ok=all(a.dtype == b.dtype for a, b in zip(co, eo)) and len(co) == len(eo),
        bitwise_equal=torch.equal(co[0], eo[0]) and all(torch.equal(a, b) for a, b in zip(cg, eg)),
        extras_equal=all(torch.equal(a, b) for a, b in zip(co[1:], eo[1:])) if len(eo) > 1 else None,
        eager_error=errors["eager"], compiled_error=errors["compiled"],
    )


def summary(fired: dict, most: int = 3) -> str:
    """``name=count`` of the counters that fired, the largest first, ``+N`` for the rest."""
    items = sorted(fired.items(), key=lambda kv: -kv[1])
    return " ".join(f"{k}={v}" for k, v in items[:most]) + (f" +{len(items) - most}" if len(items) > most else "") or "-"


def print_table(rows: list) -> None:
    print("| loss | head | graph | eager ms | compiled ms | ratio | extra MiB eager / compiled (diff) | compile s ([3/4 BT,] BT +later) "
          "| graphs | counters | error vs float64 eager / compiled: loss; grad_x; grad_w | dtype | bitwise | extras vs eager |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "eager_ms" not in r:
            print(f"| {r['loss']} | {r['head']} | {r['graph']} | {r.get('skipped') or r.get('error', '')[:120]} |")
            continue
        e, c = r["eager_error"], r["compiled_error"]
        err = "; ".join(f"{e[k]:.1e} / {c[k]:.1e}" for k in ("loss", "grad_x", "grad_w"))
        extras = "-" if r["extras_equal"] is None else ("equal" if r["extras_equal"] else "DIFFER")
        first = f"{r['first_call_s']:.1f}, " if r["first_call_s"] is not None else ""
        timed = f" (+{r['graphs_while_timed']} while timed!)" if r["graphs_while_timed"] else ""
        loss = r["loss"] + (" (dispatch inlined)" if r.get("dispatch") == "inlined" else "") + (f" [{r['setting']}]" if r.get("setting") else "")
        print(f"| {loss} | {r['head']} | {r['graph']} | {r['eager_ms']:.2f} | {r['compiled_ms']:.2f} | {r['ratio']:.3f} | "
              f"{r['eager_mib']:.0f} / {r['compiled_mib']:.0f} ({r['extra_mib']:+.0f}) | {first}{r['compile_s']:.1f} +{r['settle_s']:.1f} | {r['graphs']}{timed} | "
              f"{summary(r['counters'])} | {err} | {'ok' if r['dtype_ok'] else 'DIFFERS'} {r['loss_dtype']} | "
              f"{'yes' if r['bitwise_equal'] else 'no'} | {extras} |")


def header() -> str:
    import importlib.metadata

    versions = [f"torch {torch.__version__}"]
    for dist in ("triton", "liger-kernel"):
        try:
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{dist} not installed")
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    try:
        import inductor_addmm_fix

        status = str(inductor_addmm_fix.status()).splitlines()  # the package and torch versions, then the summary
        package = f"{status[0]}: {status[1].strip()}"
    except Exception as error:  # an older package without status(), or one that fails to report
        package = f"inductor_addmm_fix status unavailable ({type(error).__name__})"
    return f"# {', '.join(versions)}, {gpu}; {package}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bt", type=int, default=4096, help="tokens per step (default 4096)")
    p.add_argument("--losses", nargs="+", metavar="NAME", help="families (flce, jsd, kl) or rows (e.g. flce:softcap, jsd:None-T2)")
    p.add_argument("--heads", nargs="+", choices=list(HEADS), default=list(HEADS))
    p.add_argument("--graphs", nargs="+", choices=GRAPHS, default=list(GRAPHS))
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a subset of about 8 minutes on an H100 (see QUICK)")
    p.add_argument("--list", action="store_true", help="print the rows and their estimated seconds, run nothing")
    p.add_argument("--time-limit", type=float, metavar="S", help="start no row whose estimate ends past S seconds")
    p.add_argument("--json", help="write every row here (rewritten as each completes)")
    p.add_argument("--profile", type=int, metavar="TOP", default=0,
                   help="per row, eager and compiled: GPU busy time per step against the step's time, and the TOP kernels")
    p.add_argument("--profile-sort", choices=("device", "cpu"), default="device",
                   help="--profile's table: the TOP events by their own GPU time (default) or by their own host time")
    p.add_argument("--head-settings", metavar="MODES",
                   help="run each row under each INDUCTOR_ADDMM_FIX_LIGER_HEAD value of this comma list (e.g. auto,loop)")
    p.add_argument("--inline-dispatch", action="store_true", help="JSD and KL-div: Liger's dispatch() as a traceable call (see above)")
    p.add_argument("--inductor", action="append", default=[], metavar="NAME=VALUE",
                   help="set torch._inductor.config.NAME for the whole run (a Python literal), e.g. reorder_for_peak_memory=False")
    args = p.parse_args(argv)
    if args.reps < 6:
        p.error("--reps: at least 6")
    unknown = [s for s in args.losses or [] if not any(s == c or s == c.split(":")[0] for c in CONFIGS)]
    if unknown:
        p.error(f"--losses: not a family or row: {', '.join(unknown)} (rows: {', '.join(CONFIGS)})")
    selected = rows_for(args)
    settings = args.head_settings.split(",") if args.head_settings else [None]
    selected = [(c, h, g, setting) for c, h, g in selected for setting in settings]
    estimates = [estimate(c, h, g, args.bt, args.warmup, args.reps) for c, h, g, _ in selected]
    if args.list:
        for (c, h, g, setting), s in zip(selected, estimates):
            print(f"{c:24} {h:13} {g:10} {setting or '':7} ~{s:4.0f} s")
        print(f"# {len(selected)} rows, BT {args.bt}, estimated {sum(estimates) / 60:.1f} min on an H100 (rough: compiles dominate)")
        return 0
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 2
    import inductor_addmm_fix  # noqa: F401  (the import applies the fix, where no entry point did)

    for setting in args.inductor:
        name, _, value = setting.partition("=")
        if not hasattr(torch._inductor.config, name):
            p.error(f"--inductor: torch._inductor.config has no {name}")
        setattr(torch._inductor.config, name, ast.literal_eval(value))
    first_line = header()
    if args.inductor:
        first_line += f"; Inductor config {', '.join(args.inductor)}"
    print(first_line, flush=True)
    print(f"# {len(selected)} rows, BT {args.bt}, estimated {sum(estimates) / 60:.1f} min", flush=True)
    rows, start = [], time.perf_counter()
    for (config, head, graph, setting), guess in zip(selected, estimates):
        row, row_start = dict(loss=config, head=head, graph=graph, bt=args.bt), time.perf_counter()
        if setting is not None:  # read by the package while Dynamo traces the row
            os.environ["INDUCTOR_ADDMM_FIX_LIGER_HEAD"] = row["setting"] = setting
        if args.time_limit is not None and row_start - start + guess > args.time_limit:
            row["skipped"] = f"not run: --time-limit {args.time_limit:.0f} s"
        else:
            try:
                row |= run_row(config, head, graph, args)
            except Exception as error:  # a row that fails is reported, the others run
                traceback.print_exc(limit=-6)
                row["error"] = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
            row["row_s"] = time.perf_counter() - row_start
            torch._dynamo.reset()
            torch.cuda.empty_cache()
        note = row.get("skipped") or row.get("error")
        print(f"# {config} {head} {graph}: {note}" if note else f"# row: {json.dumps(row)}", flush=True)
        rows.append(row)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(header=first_line, bt=args.bt, rows=rows), f, indent=1)
    print_table(rows)
    print(f"# {sum('eager_ms' in r for r in rows)} of {len(rows)} rows ran in {(time.perf_counter() - start) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
