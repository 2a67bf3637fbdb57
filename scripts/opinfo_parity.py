#!/usr/bin/env python3
"""Compile PyTorch's own operator samples (the OpInfo database of torch.testing) with
Inductor twice, with the package installed and without it, and report every case where
the two differ: a result that is not the same bits, an exception only one of them
raises, or another exception type.  The package should change nothing for a program
that does not use its ops; a program that does gets stock's failure replaced by a result.

    python scripts/opinfo_parity.py                       # every op, CPU, float32
    python scripts/opinfo_parity.py --device cuda --dtype bfloat16 --jobs 4
    python scripts/opinfo_parity.py --ops looked-at --samples 0 --grad   # the full sweep (pytest -m full_sweep)
    python scripts/opinfo_parity.py --ops looked-at --samples 0 --grad --pick 3 --seed 0   # the slow tests' sample
    python scripts/opinfo_parity.py --ops 'mm|addmm|bmm|linear|matmul' --samples 0
    python scripts/opinfo_parity.py --modes static dynamic --jobs 2 --out /tmp/parity

Each case: one sample input of one op, compiled with ``torch.compile(backend="inductor",
dynamic=...)`` (``--grad``: the gradients of the outputs' sum too), from a fresh Dynamo,
with Inductor's caches off and ``fallback_random`` on (random ops draw eager's numbers).
``--pick N`` keeps N cases of each op (its samples times the modes), drawn with
``--seed``: the same cases on every run.  Results go to ``--out`` as JSON lines, one
file per job; the summary counts the cases and lists the differences.  The jobs are
this process's children, in its process group: an interrupt (Ctrl-C, SIGTERM) or an
error stops them before this process exits.  Needs ``expecttest`` (torch's test
utilities import it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path


def describe(error: BaseException) -> str:
    """An exception as ``Type: its first non-empty line`` (at most 300 characters)."""
    line = next((s for s in str(error).splitlines() if s.strip()), "")
    return f"{type(error).__name__}: {line[:300]}"


def outcome(fn, args):
    """('ok', tensors) or ('error', description)."""
    import torch

    try:
        result = fn(*args)
    except Exception as error:  # noqa: BLE001 (every failure is data here)
        return "error", describe(error)
    tensors = [t.detach() for t in torch.utils._pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]
    return "ok", tensors


#: ``--ops looked-at``: the ops whose graphs the package's lowerings, decompositions and
#: passes inspect: the matmul family and the ops that write or view slices of a buffer.
LOOKED_AT = (
    r"^(mm|bmm|addmm|baddbmm|addbmm|addmv|matmul|nn\.functional\.linear|"
    r"as_strided|as_strided_scatter|slice_scatter|narrow|cat|index_put|index_copy)$"
)

#: Ops whose result is uninitialized memory: only shape, dtype and strides are compared.
UNINITIALIZED = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"})


def same_bits(a: list, b: list, values: bool = True) -> bool:
    """Whether two results are the same tensors: shapes, dtypes, layouts and strides, and
    (``values``) every bit of every element (the sign of a zero, a NaN's payload)."""
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype or x.layout != y.layout:
            return False
        if x.layout == torch.strided and x.stride() != y.stride():
            return False
        if not values:
            continue
        if x.layout != torch.strided:
            x, y = x.to_dense(), y.to_dense()
        if x.is_complex():
            x, y = torch.view_as_real(x.resolve_conj()), torch.view_as_real(y.resolve_conj())
        if x.dtype.is_floating_point:
            bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
            x, y = x.contiguous().view(bits), y.contiguous().view(bits)
        if not torch.equal(x, y):
            return False
    return True


def case_function(op, sample, grad: bool):
    """The function compiled for one sample, and a maker of its arguments (every tensor
    cloned, so that each arm gets its own)."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map

    def call(inp, *args):
        out = op(inp, *args, **sample.kwargs)
        if not grad:
            return out
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
        wrt = [t for t in tree_leaves((inp, args)) if isinstance(t, torch.Tensor) and t.requires_grad]
        if not outs or not wrt:
            return out
        total = sum(o.abs().sum() if o.is_complex() else o.float().sum() for o in outs)
        return out, torch.autograd.grad(total, wrt, allow_unused=True)

    def fresh_args():
        clone = lambda t: t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t  # noqa: E731
        return tree_map(clone, [sample.input, *sample.args])

    return call, fresh_args


def run_case(op, sample, mode: str, grad: bool, package) -> dict:
    """Compile one case with the package installed and without; say how they differ."""
    import torch

    call, fresh_args = case_function(op, sample, grad)
    arms = {}
    try:
        for arm in ("package", "stock"):
            if arm == "package":
                package.install()
            else:
                package.uninstall()
            torch._dynamo.reset()
            compiled = torch.compile(call, backend="inductor", dynamic=(mode == "dynamic"))
            torch.manual_seed(0)
            arms[arm] = outcome(compiled, fresh_args())
    finally:
        package.install()  # the next case starts from the package installed, whatever happened here
    (p_kind, p_val), (s_kind, s_val) = arms["package"], arms["stock"]
    if p_kind == s_kind == "ok":
        verdict = "same" if same_bits(p_val, s_val, values=op.name not in UNINITIALIZED) else "different bits"
    elif p_kind == s_kind == "error":
        verdict = "same error" if p_val.split(":")[0] == s_val.split(":")[0] else "other error"
    else:
        verdict = "package fixes" if p_kind == "ok" else "package breaks"
    row = {"verdict": verdict}
    if p_kind == "error":
        row["package"] = p_val
    if s_kind == "error":
        row["stock"] = s_val
    return row


def worker(args) -> None:
    """Run this job's share of the cases, one JSON line each."""
    import torch
    import torch._inductor.config as inductor_config

    import inductor_addmm_fix as package
    from torch.testing._internal.common_methods_invocations import op_db

    package.install()
    if not package.is_installed():
        raise SystemExit(f"the package does not install in this process:\n{package.status()}")
    inductor_config.force_disable_caches = True
    inductor_config.fallback_random = True
    torch._dynamo.config.cache_size_limit = 64
    pattern = re.compile(LOOKED_AT if args.ops == "looked-at" else args.ops) if args.ops else None
    ops = [o for o in op_db if (pattern is None or pattern.search(o.name))]
    ops = [o for i, o in enumerate(ops) if i % args.jobs == args.job]
    dtype = getattr(torch, args.dtype)
    with open(Path(args.out) / f"job{args.job}.jsonl", "a") as out:
        for op in ops:
            if dtype not in op.supported_dtypes(args.device):
                continue
            grad = args.grad and op.supports_autograd and dtype.is_floating_point
            torch.manual_seed(0)
            try:
                samples = list(op.sample_inputs(args.device, dtype, requires_grad=grad))
            except Exception as error:  # noqa: BLE001
                print(json.dumps({"op": op.name, "variant": op.variant_test_name, "verdict": "no samples", "error": describe(error)}), file=out, flush=True)
                continue
            chosen = samples if args.samples == 0 else samples[: args.samples]
            for index, mode in picked(op, len(chosen), args):
                start = time.time()
                try:
                    row = run_case(op, chosen[index], mode, grad, package)
                except Exception as error:  # noqa: BLE001 (a harness failure is reported, not fatal)
                    row = {"verdict": "harness error", "error": describe(error), "trace": traceback.format_exc()[-800:]}
                row = {"op": op.name, "variant": op.variant_test_name, "sample": index, "mode": mode, "grad": grad,
                       "seconds": round(time.time() - start, 2), **row}
                print(json.dumps(row), file=out, flush=True)


def picked(op, samples: int, args) -> list[tuple[int, str]]:
    """The (sample index, mode) cases of one op to run: all of them, or ``--pick`` of them
    drawn with ``--seed`` (the same on every run and in every job)."""
    cases = [(index, mode) for index in range(samples) for mode in args.modes]
    if not args.pick or args.pick >= len(cases):
        return cases
    draw = random.Random(f"{args.seed}:{op.name}:{op.variant_test_name}")
    return sorted(draw.sample(cases, args.pick), key=cases.index)


def run_jobs(commands: list[list[str]], env: dict) -> list[int]:
    """Run the jobs side by side; their exit codes.  However this ends (an error, Ctrl-C,
    SIGTERM, which is turned into SystemExit here), no job outlives it: a SIGTERM that
    comes while the jobs start (a job forked, its Popen not yet returned) is held until
    every started job is in the list the cleanup kills."""
    starting, held = True, []

    def on_sigterm(signum, frame):
        if starting:
            held.append(signum)
            return
        _exit_on_sigterm(signum, frame)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    jobs = []
    try:
        for command in commands:
            jobs.append(subprocess.Popen(command, env=env))
        starting = False
        if held:
            _exit_on_sigterm(held[0], None)
        return [job.wait() for job in jobs]
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
        for job in jobs:
            job.wait()
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def summarize(out: Path) -> int:
    rows = [json.loads(line) for f in sorted(out.glob("job*.jsonl")) for line in f.read_text().splitlines() if line]
    counts: dict = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    print(f"{len(rows)} cases: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())))
    bad = [r for r in rows if r["verdict"] in ("different bits", "other error", "package breaks", "harness error")]
    fixed = [r for r in rows if r["verdict"] == "package fixes"]
    for title, group in (("Differences", bad), ("Failing stock, compiled with the package", fixed)):
        if group:
            print(f"\n{title}:")
            for r in group:
                name = r["op"] + (f".{r['variant']}" if r.get("variant") else "")
                detail = r.get("package") or r.get("stock") or r.get("error") or ""
                print(f"  {name} sample {r.get('sample')} {r.get('mode')}{' grad' if r.get('grad') else ''}: {r['verdict']}  {detail}")
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", help="regular expression on the OpInfo names, or looked-at (default: all)")
    parser.add_argument("--samples", type=int, default=1, help="samples per op (0: all; default 1)")
    parser.add_argument("--pick", type=int, default=0,
                        help="cases per op (of its samples times the modes), drawn with --seed (default 0: all)")
    parser.add_argument("--seed", type=int, default=0, help="the draw of --pick (default 0)")
    parser.add_argument("--modes", nargs="+", default=["static", "dynamic"], choices=["static", "dynamic"])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda")
    parser.add_argument("--grad", action="store_true", help="compile the gradients too, where the op has them")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)))
    parser.add_argument("--out", help="folder for the results (default: a new temporary one)")
    parser.add_argument("--job", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job is not None:
        worker(args)
        return 0
    out = Path(args.out or tempfile.mkdtemp(prefix="opinfo-parity-"))
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("job*.jsonl"):
        old.unlink()
    base = [sys.executable, os.path.abspath(__file__), "--samples", str(args.samples), "--dtype", args.dtype, "--device", args.device,
            "--jobs", str(args.jobs), "--out", str(out), "--modes", *args.modes, "--pick", str(args.pick), "--seed", str(args.seed)]
    base += ["--ops", args.ops] if args.ops else []
    base += ["--grad"] if args.grad else []
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.time()
    codes = run_jobs([[*base, "--job", str(j)] for j in range(args.jobs)], env)
    failed = [j for j, code in enumerate(codes) if code != 0]
    print(f"results in {out} ({math.ceil(time.time() - start)} s)")
    if failed:
        print(f"jobs {failed} exited with an error; their cases after it are missing")
    return summarize(out) or (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
