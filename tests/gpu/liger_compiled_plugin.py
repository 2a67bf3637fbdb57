"""pytest plugin for Liger-Kernel's own test files: one compiled loss Function serves
every test case of the process, as a training job's one compiled model serves every batch.

    cd <liger source>  # its test/ folder
    python -m pytest -p liger_compiled_plugin test/transformers/test_fused_linear_cross_entropy.py
    LIGER_COMPILED=jsd python -m pytest -p liger_compiled_plugin test/transformers/test_fused_linear_jsd.py

(with this file's folder on PYTHONPATH).  ``LIGER_COMPILED`` names the Function (``flce``,
the default; ``jsd``; ``kl_div``): its ``apply`` is replaced by a ``torch.compile``d call
of the original, created once; the package is active through its import here as it is
through installation.  At the end the plugin prints how many frames Dynamo compiled.
"""

from __future__ import annotations

import importlib
import os

import torch

import inductor_addmm_fix  # noqa: F401  (active, as installation makes it)

FUNCTIONS = {
    "flce": ("liger_kernel.ops.fused_linear_cross_entropy", "LigerFusedLinearCrossEntropyFunction"),
    "jsd": ("liger_kernel.ops.fused_linear_jsd", "LigerFusedLinearJSDFunction"),
    "kl_div": ("liger_kernel.ops.fused_linear_kl_div", "LigerFusedLinearKLDivFunction"),
}
_module, _name = FUNCTIONS[os.environ.get("LIGER_COMPILED", "flce")]
_Function = getattr(importlib.import_module(_module), _name)
_stock_apply = _Function.apply
_compiled = torch.compile(lambda *args: _stock_apply(*args))
_Function.apply = lambda *args: _compiled(*args)
# Every test case is a new shape or dtype: let the one function recompile as often as it must.
torch._dynamo.config.recompile_limit = 256
torch._dynamo.config.accumulated_recompile_limit = 8192


def pytest_sessionfinish(session, exitstatus):
    """Print, and with ``LIGER_COUNTS=<folder>`` also write as ``<worker>.json``, what the
    process compiled: Dynamo's frames, graphs and graph breaks, and the package's counters
    (an xdist worker's print does not reach ``-q``'s output; the file does)."""
    from torch._dynamo.utils import counters

    seen = {
        "function": _name,
        "frames": dict(counters["frames"]),
        "graphs": counters["stats"].get("unique_graphs"),
        "graph_breaks": sum(counters["graph_break"].values()),
        "package": dict(counters["inductor_addmm_fix"]),
    }
    print(f"\ncompiled {_name}: {seen}")
    folder = os.environ.get("LIGER_COUNTS")
    if folder:
        import json

        os.makedirs(folder, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(folder, f"{_name}-{worker}.json"), "w") as f:
            json.dump(seen, f, indent=1, sort_keys=True)
