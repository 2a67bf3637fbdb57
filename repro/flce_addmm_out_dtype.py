"""The bug report's scenario: Liger FLCE's weight-gradient accumulation
``torch.addmm(grad_weight, g.t(), x, out_dtype=torch.float32, out=grad_weight)``
under torch.compile/Inductor.

    python repro/flce_addmm_out_dtype.py --without-plugin   # prints REPRODUCED
    python repro/flce_addmm_out_dtype.py                     # prints FIXED

Device: CUDA if available (with Liger-Kernel installed, the report's exact FLCE
call; otherwise the same addmm pattern), else the CPU (the addmm pattern; eager
has no CPU kernel for it, so the compiled result is checked against float64).

Exit status: 0 when the result is the expected one (FIXED with the plugin,
REPRODUCED without it), 1 when it is not, 2 when the scenario cannot run here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version

KNOWN_FAILURES = (
    # Core decomposition error: PyTorch 2.8-2.12
    "unsupported operand type(s) for *: 'torch.dtype' and 'FakeTensor'",
    # Inductor lowering error: PyTorch 2.13+ after the core fix
    "tuned_addmm() takes 3 positional arguments but 4 were given",
    # Inductor on the CPU: no out_dtype kernel outside CUDA/XPU
    "out_dtype is only supported for CUDA or XPU",
)


def package_version(name: str, fallback: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return fallback


def addmm_scenario(device: str):
    """FLCE's chunked accumulation; returns (compiled grad_weight, reference, exact?)."""
    import torch

    bt, v, h, chunk = 64, 96, 32, 16
    g = torch.randn(bt, v, device=device, dtype=torch.bfloat16)
    x = torch.randn(bt, h, device=device, dtype=torch.bfloat16)
    start = torch.randn(v, h, device=device)

    def accumulate(grad_weight, g, x):
        for i in range(0, bt, chunk):
            torch.addmm(grad_weight, g[i : i + chunk].t(), x[i : i + chunk], out_dtype=torch.float32, out=grad_weight)
        return grad_weight

    compiled = torch.compile(accumulate, backend="inductor", fullgraph=True)(start.clone(), g, x)
    if device == "cuda":
        return compiled, accumulate(start.clone(), g, x), True  # eager cuBLAS
    return compiled, start.double() + g.double().t() @ x.double(), False


def liger_scenario():
    """The report's exact FLCE call; returns (compiled outputs, eager outputs, exact?)."""
    import torch
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    x = torch.randn(8, 16, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(32, 16, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(32, (8,), device="cuda")

    def step(x, weight, target):
        return liger_fused_linear_cross_entropy(x, weight, target, accum_dtype=torch.float32)

    def run(fn):
        x.grad = weight.grad = None
        loss = fn(x, weight, target)
        loss.backward()
        return torch.cat([loss.detach().float().reshape(1), x.grad.float().flatten(), weight.grad.float().flatten()])

    torch._dynamo.config.capture_scalar_outputs = True
    compiled = run(torch.compile(step))
    return compiled, run(step), True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--without-plugin", action="store_true", help="run stock torch (expects REPRODUCED)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--no-liger", action="store_true", help="on CUDA, use the addmm pattern even if Liger is installed")
    args = parser.parse_args(argv)

    if args.without_plugin:
        os.environ["INDUCTOR_ADDMM_FIX"] = "0"  # before torch: no activation route applies
    import torch

    if args.without_plugin:
        with contextlib.suppress(ImportError):
            import inductor_addmm_fix

            inductor_addmm_fix.uninstall()
    else:
        import inductor_addmm_fix

        inductor_addmm_fix.install()

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() and torch.version.hip is None else "cpu"
    use_liger = device == "cuda" and not args.no_liger and package_version("liger-kernel", "") != ""

    print(f"OS:      {platform.platform()}")
    print(f"Python:  {platform.python_version()}")
    print(f"PyTorch: {torch.__version__}")
    print(f"Liger:   {package_version('liger-kernel', 'not installed')}")
    print(f"Plugin:  {'off' if args.without_plugin else 'inductor_addmm_fix ' + inductor_addmm_fix.__version__}")
    if device == "cuda":
        if not torch.cuda.is_available():
            print("Result:  SKIP — CUDA requested but not available")
            return 2
        cap = torch.cuda.get_device_capability()
        print(f"GPU:     {torch.cuda.get_device_name()} (compute capability {cap[0]}.{cap[1]})")
    case = "Liger FLCE, bf16 operands -> fp32 accumulator" if use_liger else "FLCE's addmm(out_dtype=fp32, out=grad_weight) loop"
    print(f"Case:    {case}, torch.compile/Inductor on {device}")

    if "dtype_out" not in torch.ops.aten.addmm.overloads():
        print("Result:  SKIP — requires PyTorch 2.8+")
        return 2

    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            compiled, reference, exact = liger_scenario() if use_liger else addmm_scenario(device)
    except Exception as error:
        message = str(error)
        first = message.splitlines()[0] if message else type(error).__name__
        for known in KNOWN_FAILURES:
            if known in message:
                print(f"Result:  REPRODUCED — {known}")
                return 0 if args.without_plugin else 1
        print(f"Result:  UNEXPECTED — {type(error).__name__}: {first}")
        return 1

    if compiled.dtype != torch.float32:
        print(f"Result:  WRONG — compiled result has dtype {compiled.dtype}, expected torch.float32")
        return 1
    if exact:
        # Bit for bit, or the same fp32 sums in another order (the package's accumulate_pairs
        # feature adds two chunks' products per pass): within fp32 rounding of eager.
        rel = ((compiled.double() - reference.double()).norm() / reference.double().norm()).item()
        same = rel <= 1e-6
        detail = "bit for bit equal to eager" if torch.equal(compiled, reference) else f"within {rel:.1e} of eager (fp32 sums in another order)"
    else:
        err = ((compiled.double() - reference).norm() / reference.norm()).item()
        same = err < 1e-5
        detail = f"relative error vs float64 {err:.2e}"
    if not same:
        print(f"Result:  WRONG — {detail}")
        return 1
    print(f"Result:  {'NOT REPRODUCED' if args.without_plugin else 'FIXED'} — compiled, float32, {detail}")
    return 1 if args.without_plugin else 0


if __name__ == "__main__":
    sys.exit(main())
