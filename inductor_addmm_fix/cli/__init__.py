"""``python -m inductor_addmm_fix [status|check]``.

status (the default, ``cli.status``): torch version, each feature and patch and whether
it applied, how the package was activated, and which routes fresh interpreters would
take.  Exit 0 when the package is active, 1 when it is not, 2 when torch cannot be
imported.

check (``cli.check``): compile a tiny ``addmm(out_dtype=)`` graph.  Exit 0 FIXED,
1 BROKEN, 2 could not run.
"""

from __future__ import annotations

import argparse
import sys

from . import check, status


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
            return check.run(args.device)
        except Exception as error:  # the check itself failed, not the fix
            print(f"could not run: the check failed ({type(error).__name__}: {error})")
            return check.CANNOT_RUN
    return status.run(getattr(args, "json", False))
