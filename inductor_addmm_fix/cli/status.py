"""``python -m inductor_addmm_fix status``: the report of ``inductor_addmm_fix.status()``
and the activation routes a fresh interpreter would take."""

from __future__ import annotations

import json
import os

from ..activation import routes
from ..activation.env import VARIABLE


def _routes_report() -> dict[str, str]:
    value = os.environ.get(VARIABLE)
    autoload = "on" if routes.autoload_enabled() else "off (TORCH_DEVICE_BACKEND_AUTOLOAD)"
    covered = routes.fresh_interpreters_covered()
    return {
        VARIABLE: "unset (on)" if value is None else repr(value),
        "torch.backends entry point": ("registered" if routes.entry_point_registered() else "not installed")
        + f", autoload {autoload}",
        ".pth start-up line": routes.pth_file() or "not installed",
        "fresh interpreters": "covered (spawned workers, torchrun ranks, Inductor's subprocess compile)"
        if covered
        else "NOT covered: they get the fix only if they import inductor_addmm_fix",
    }


def run(as_json: bool) -> int:
    """Print the report; exit code 0 when the package is active, 1 when not, 2 without torch."""
    try:
        import torch  # noqa: F401  (activates the fix through whichever route is on)
    except Exception as error:
        print(f"could not run: torch cannot be imported ({type(error).__name__}: {error})")
        return 2
    import inductor_addmm_fix as fix

    try:
        import torch._inductor.compile_fx  # noqa: F401  (the Inductor part of each feature waits for it)
    except Exception as error:
        print(f"(torch._inductor cannot be imported: {type(error).__name__}: {error})")
    report = fix.status()
    route_report = _routes_report()
    if as_json:
        print(json.dumps({**report.as_dict(), "routes": route_report}, indent=2))
    else:
        print(report)
        print("routes:")
        for name, value in route_report.items():
            print(f"  {name + ':':<28} {value}")
    return 0 if report.installed else 1
