"""The `fusecheck` command. Subcommands are a registry of (module, help); each module exposes
`add_arguments(parser)` and `run(args) -> exit code`.

Exit codes: 0 pass; 1 fail (compiled worse than eager, or a finding such as nondeterminism);
2 bad usage or bad input (unknown target/toggle/backend, empty output, all-NaN golden, policy error);
3 the tool or compiler broke (compile error, a rank that hung or crashed, --time-limit reached).
"""
from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from fusecheck.case import TargetError
from fusecheck.passes import ToggleError
from fusecheck.policy import PolicyError
from fusecheck.report.baseline import BaselineError
from fusecheck.watchdog import Watchdog

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "check": ("fusecheck.check_cli", "compare eager, compiled and golden on a target"),
    "matrix": ("fusecheck.matrix", "run the check once per fusion toggle"),
    "toggles": ("fusecheck.passes.cli", "list the fusion toggles, what each does and whether torch supports it"),
    "bisect": ("fusecheck.bisect.cli", "name the pass or fusion that makes compiled worse than eager"),
    "dist": ("fusecheck.dist.cli", "layered validation of distributed fused comm+compute kernels"),
}

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3
DEFAULT_TIME_LIMIT_S = 3600.0


USAGE_ERRORS: tuple[type[BaseException], ...] = (TargetError, PolicyError, ToggleError, BaselineError)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, object]]:
    parser = argparse.ArgumentParser(prog="fusecheck", description=__doc__.split("\n\n")[0],
                                     epilog="exit codes: 0 pass, 1 fail, 2 bad usage/input, 3 tool or compiler error")
    sub = parser.add_subparsers(dest="command")
    modules: dict[str, object] = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        modules[name] = module
        p = sub.add_parser(name, help=help_text)
        module.add_arguments(p)
        p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, metavar="SECONDS",
                       help=f"wall-clock bound on the whole command; on expiry exit 3 naming the phase "
                            f"(default {DEFAULT_TIME_LIMIT_S:g}; 0 = none)")
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, modules = build_parser()
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["check", *argv]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    try:
        with Watchdog(args.time_limit, args.command):
            return modules[args.command].run(args)
    except USAGE_ERRORS as exc:
        print(f"fusecheck: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # compile errors and other tool failures: never a verdict, never exit 1
        from fusecheck.golden_fallback import GoldenError
        from fusecheck.run import CompileError
        if not isinstance(exc, (CompileError, GoldenError)):
            traceback.print_exc()
        print(f"fusecheck: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
