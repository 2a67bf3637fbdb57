"""``python -m inductor_addmm_fix [status|check] [-v] [--json]``; ``--version``.

status (the default, ``cli.status``): whether the fix is active in this Python and why,
one line per feature; ``-v`` adds each patch and why, and every activation route.

check (``cli.check``): compile a tiny ``addmm(out_dtype=)`` graph here and now.

``-v`` and ``--json`` go before or after the command (``-v``: status gives each patch and
why, every route; check logs what the package does on stderr; ``-vv``: status logs too).  Exit codes (``EXIT_CODES``):

  0   status: the fix is active          check: FIXED
  1   status: the fix is not active      check: BROKEN
      (out_dtype off; or it applies at first compile, and torch._inductor cannot be imported)
  2   could not run (no torch; for check also a torch before 2.8, a missing device,
      or an Inductor that cannot be imported or compile a plain matmul)
  64  usage error: an unknown command or option (EX_USAGE of sysexits.h)
"""

from __future__ import annotations

import argparse
import json
import sys

from . import check, status

USAGE_ERROR = 64
EXIT_CODES = """exit codes:
  0   status: the fix is active          check: FIXED
  1   status: the fix is not active      check: BROKEN
      (out_dtype off; or it applies at first compile, and torch._inductor cannot be imported here)
  2   could not run (no torch; check: a torch before 2.8, the device asked for is
      missing, or Inductor cannot be imported or compile a plain matmul here)
  64  usage error (an unknown command or option)"""


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors on exit code 64: argparse's own 2 is "could not run" here."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def _version(as_json: bool) -> int:
    """``--version``: the package version and the git revision (computed only when asked)."""
    from .revision import package_version, version_report

    print(json.dumps(version_report(), indent=2) if as_json else f"inductor_addmm_fix {package_version()}")
    return 0


def _common_options(parser: argparse.ArgumentParser, default) -> None:
    # Given to the main parser (default False) and to each command (default SUPPRESS,
    # so that an option given before the command is not reset by the command's parser).
    parser.add_argument("-v", "--verbose", action="count", default=default,
                        help="status: each patch and why, every route (-vv: also the package's log "
                        "on stderr); check: the package's log on stderr")
    parser.add_argument("--json", action="store_true", default=default, help="machine-readable output")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m inductor_addmm_fix",
        description="Status and self-check of inductor_addmm_fix (matmuls with out_dtype= under\n"
        "torch.compile). Without a command: status.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="store_true",
                        help="print the package version and the git revision it runs or was built from, and exit")
    _common_options(parser, 0)
    commands = parser.add_subparsers(dest="command", metavar="{status,check}")
    status_parser = commands.add_parser(
        "status", help="is the fix active here, feature by feature (default)",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common_options(status_parser, argparse.SUPPRESS)
    check_parser = commands.add_parser(
        "check", help="compile a tiny addmm(out_dtype=) graph: FIXED or the error",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check_parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                              help="where to compile (auto: CUDA if available, else the CPU)")
    _common_options(check_parser, argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit:  # --help (0) or a usage error (64)
        return exit.code if isinstance(exit.code, int) else USAGE_ERROR
    if args.version:
        return _version(args.json)
    if args.verbose >= (1 if args.command == "check" else 2):
        import logging

        logging.basicConfig(stream=sys.stderr, format="%(name)s: %(message)s")
        logging.getLogger("inductor_addmm_fix").setLevel(logging.DEBUG)
    try:
        if args.command == "check":
            return check.main(args.device, as_json=args.json)
        return status.run(args.json, verbose=args.verbose)
    except BrokenPipeError:  # `... | head`: the reader left; nothing to report, nothing to flush
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
