"""``python -m inductor_addmm_fix check``: compile a tiny ``addmm(out_dtype=)`` graph
with Inductor, here and now, and say FIXED or why not.

Exit codes: 0 FIXED (compiled; float32 result; right numbers; the plugin's lowering
ran, or this torch needs none), 1 BROKEN (the compile fails, or its result is
wrong), 2 could not run (no torch, a torch before 2.8, the device asked for is
missing, or Inductor cannot compile even a plain matmul here).
"""

from __future__ import annotations

import contextlib
import json

FIXED, BROKEN, CANNOT_RUN = 0, 1, 2
RESULTS = {FIXED: "FIXED", BROKEN: "BROKEN", CANNOT_RUN: "could not run"}

LOWERING_KEY = "addmm.dtype:product_then_epilogue"
LOWERING_PATCH = "inductor.lowering.addmm.dtype"
M, K, N = 32, 64, 16  # no size-1 dimension: the general addmm.dtype lowering, not a small-shape path
TOLERANCE = 1e-5  # relative error of an fp32 accumulation of exact bf16 products
_GRAPH_CACHES = ("fx_graph_cache", "fx_graph_remote_cache", "enable_autograd_cache", "enable_remote_autograd_cache")


def _first_line(error: BaseException) -> str:
    """``InductorError: LoweringException: TypeError: tuned_addmm() takes ...``, one line;
    for an error raised in a subprocess, its header and the cause below the traceback."""
    lines = [line.rstrip() for line in str(error).splitlines() if line.strip()]
    summary = lines[0].strip() if lines else ""
    if "Traceback (most recent call last):" in lines:
        after = lines[lines.index("Traceback (most recent call last):") + 1 :]
        cause = next((line for line in after if not line.startswith(" ")), "")
        summary = f"{summary} {cause}"
    return f"{type(error).__name__}: {summary}"[:400]


def _relative_error(out, ref) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def _compile_and_run(fn, *args):
    import torch

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="inductor", fullgraph=True)
    # A graph served from a graph cache would skip lowering: turn those off (the
    # kernel binary cache stays, so a second check does not rebuild the kernel).
    with contextlib.ExitStack() as stack:
        for config in (torch._inductor.config, torch._functorch.config):
            off = {k: False for k in _GRAPH_CACHES if hasattr(config, k)}
            stack.enter_context(config.patch(off))
        return compiled(*args)


def _subprocess_compile() -> bool:
    import torch._inductor.compile_fx as compile_fx

    mode = getattr(compile_fx, "fx_compile_mode", None)
    return getattr(mode, "name", "") == "SUBPROCESS"


def main(device: str = "auto", as_json: bool = False) -> int:
    """The command: run the check, print its lines (or one JSON object), return the exit code."""
    lines: list[str] = []
    say = lines.append if as_json else print
    try:
        code = run(device, say)
    except Exception as error:  # the check itself failed, not the fix
        say(f"could not run: the check failed ({type(error).__name__}: {error})")
        code = CANNOT_RUN
    if as_json:
        print(json.dumps({"result": RESULTS[code], "exit_code": code, "lines": lines}, indent=2))
    return code


def run(device: str = "auto", say=print) -> int:
    """Run the check, report through ``say``, return the exit code."""
    try:
        import torch
    except Exception as error:
        say(f"could not run: torch cannot be imported ({_first_line(error)})")
        return CANNOT_RUN
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        say("could not run: CUDA was asked for but is not available")
        return CANNOT_RUN
    if "dtype" not in torch.ops.aten.addmm.overloads():
        say(f"could not run: torch {torch.__version__} has no out_dtype overloads (PyTorch 2.8+)")
        return CANNOT_RUN

    try:
        import torch._inductor.compile_fx  # noqa: F401  (the Inductor stage of each feature applies now)
    except Exception as error:
        say(f"could not run: torch._inductor cannot be imported ({_first_line(error)})")
        return CANNOT_RUN

    import inductor_addmm_fix as fix
    from torch._dynamo.utils import counters

    from ..patching.counters import COUNTER

    from .revision import package_version

    state = fix.status()
    active = state.summary  # status's first line: out_dtype off says "fix NOT active"
    out_dtype_on = state.active
    say(f"inductor_addmm_fix {package_version()}, torch {torch.__version__}, device {device}")
    say(active)
    say(f"case: torch.addmm(fp32 [{M}x{N}], bf16 [{M}x{K}], bf16 [{K}x{N}], out_dtype=torch.float32)")
    say('      under torch.compile(backend="inductor", fullgraph=True)')

    def addmm(c, a, b):
        return torch.addmm(c, a, b, out_dtype=torch.float32)

    generator = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(shape, generator=generator) for shape in ((M, K), (K, N), (M, N)))
    a, b, c = a.to(device, torch.bfloat16), b.to(device, torch.bfloat16), c.to(device)

    counters[COUNTER].clear()
    try:
        out = _compile_and_run(addmm, c, a, b)
    except Exception as error:
        try:
            _compile_and_run(torch.mm, a, b)
        except Exception as control:
            say(f"could not run: Inductor cannot compile a plain mm here either ({_first_line(control)})")
            return CANNOT_RUN
        say(f"BROKEN: the compile fails: {_first_line(error)}")
        return BROKEN

    if out.dtype != torch.float32:
        say(f"BROKEN: the compiled result is {out.dtype}, not torch.float32")
        return BROKEN
    if device == "cpu":  # no eager CPU kernel for addmm.dtype
        reference, against = c.double() + a.double() @ b.double(), "float64"
    else:
        reference, against = addmm(c, a, b), "eager"
    error = _relative_error(out, reference)
    if not error < TOLERANCE:
        say(f"BROKEN: relative error vs {against} {error:.2e} (tolerance {TOLERANCE:.0e})")
        return BROKEN

    lowered = counters[COUNTER][LOWERING_KEY]
    planned = any(p.name == LOWERING_PATCH and p.applied for p in fix.status().patches)
    if lowered:
        how = f"the plugin's lowering ran ({LOWERING_KEY} x{lowered})"
    elif _subprocess_compile():
        how = "lowered in Inductor's compile subprocess (the plugin's counter is not visible here)"
    elif not planned and out_dtype_on:
        how = "stock Inductor lowered it (this torch needs no lowering patch)"
    else:
        say(f"BROKEN: compiled without the plugin's lowering ({LOWERING_KEY} never counted)")
        return BROKEN
    say(f"FIXED: compiled, torch.float32, relative error vs {against} {error:.1e}")
    say(f"       {how}")
    return FIXED
