"""``python -m inductor_addmm_fix [status|check]``.

status (the default): torch version, each patch and whether it applied, how the
fix was activated, and which routes fresh interpreters would take.  Exit 0 when
the fix is active, 1 when it is not, 2 when torch cannot be imported.

check: compile a tiny ``addmm(out_dtype=)`` graph (see ``_check``).  Exit 0 FIXED,
1 BROKEN, 2 could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import _check, _routes
from ._env import VARIABLE


def _routes_report() -> dict[str, str]:
    value = os.environ.get(VARIABLE)
    autoload = "on" if _routes.autoload_enabled() else "off (TORCH_DEVICE_BACKEND_AUTOLOAD)"
    covered = _routes.fresh_interpreters_covered()
    return {
        VARIABLE: "unset (on)" if value is None else repr(value),
        "torch.backends entry point": ("registered" if _routes.entry_point_registered() else "not installed")
        + f", autoload {autoload}",
        ".pth start-up line": _routes.pth_file() or "not installed",
        "fresh interpreters": "covered (spawned workers, torchrun ranks, Inductor's subprocess compile)"
        if covered
        else "NOT covered: they get the fix only if they import inductor_addmm_fix",
    }


def status(as_json: bool) -> int:
    try:
        import torch  # noqa: F401  (activates the fix through whichever route is on)
    except Exception as error:
        print(f"could not run: torch cannot be imported ({type(error).__name__}: {error})")
        return 2
    import inductor_addmm_fix as fix

    try:
        import torch._inductor.compile_fx  # noqa: F401  (Tier 2 waits for it)
    except Exception as error:
        print(f"(torch._inductor cannot be imported: {type(error).__name__}: {error})")
    report = fix.status()
    routes = _routes_report()
    if as_json:
        print(json.dumps({**report.as_dict(), "routes": routes}, indent=2))
    else:
        print(report)
        print("routes:")
        for name, value in routes.items():
            print(f"  {name + ':':<28} {value}")
    return 0 if report.installed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inductor_addmm_fix",
        description="Status and self-check of inductor_addmm_fix.",
        epilog="Exit codes: status 0 active, 1 not active, 2 no torch; check 0 FIXED, 1 BROKEN, 2 could not run.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show the package's log on stderr")
    commands = parser.add_subparsers(dest="command")
    status_parser = commands.add_parser("status", help="what is applied and how it was activated (default)")
    status_parser.add_argument("--json", action="store_true", help="machine-readable output")
    check_parser = commands.add_parser("check", help="compile a tiny addmm(out_dtype=) graph: FIXED or the error")
    check_parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    args = parser.parse_args(argv)

    if args.verbose:
        import logging

        logging.basicConfig(stream=sys.stderr, format="%(name)s: %(message)s")
        logging.getLogger("inductor_addmm_fix").setLevel(logging.DEBUG)
    if args.command == "check":
        try:
            return _check.run(args.device)
        except Exception as error:  # the check itself failed, not the fix
            print(f"could not run: the check failed ({type(error).__name__}: {error})")
            return _check.CANNOT_RUN
    return status(getattr(args, "json", False))
