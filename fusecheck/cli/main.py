"""The `fusecheck` command: parse, validate the output paths, run one subcommand under a time limit.

Subcommands are a registry of (module, help); each module exposes `add_arguments(parser)` and
`run(args) -> exit code`. Only the chosen subcommand's module is imported, and none imports torch at the
top, so `fusecheck`, `fusecheck -h` and `fusecheck --version` answer without loading torch.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import multiprocessing
import signal
import sys
import traceback

from fusecheck import __version__
from fusecheck.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

DESCRIPTION = ("Check that a fusion compiler (torch.compile with Inductor, or your own backend) does not make "
               "a model's numbers worse than eager mode, both measured against a float64 golden run.")
EPILOG = ("exit codes: 0 pass, 1 fail, 2 bad usage/input, 3 tool or compiler error, 130 interrupted.\n"
          "start with:  fusecheck check            (a built-in transformer block)\n"
          "             fusecheck check my_model.py:build --dtype bf16 --html report.html")

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "check": ("fusecheck.cli.check", "compare eager, compiled and golden on a target"),
    "matrix": ("fusecheck.matrix", "run the check once per fusion toggle"),
    "toggles": ("fusecheck.cli.toggles", "list the fusion toggles, what each does and whether torch supports it"),
    "bisect": ("fusecheck.cli.bisect", "name the pass or fusion that makes compiled worse than eager"),
    "dist": ("fusecheck.cli.dist", "layered validation of distributed fused comm+compute kernels"),
    "op": ("fusecheck.op.cli", "gate a hand-written fused kernel against its unfused chain"),
    "train": ("fusecheck.train.cli", "train N steps of eager, compiled and an fp64 shadow; judge the drift"),
}
# Each module above imports no torch at its top (its `run` imports the heavy modules), so that every
# `fusecheck COMMAND -h` answers in a fraction of a second (tests/cli/test_cli_inputs.py holds each one to it).

DEFAULT_TIME_LIMIT_S = 3600.0


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default unless the help already says it or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (not action.option_strings or "default" in text
                or any(action.default is x for x in (None, False, argparse.SUPPRESS)) or action.default in ("", [])):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """A usage error is one line (`fusecheck: error: ...`) and exit 2, as every other error of the tool."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"fusecheck: error: {message} (see `{self.prog} -h`)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def seconds(text: str) -> float:
    """--time-limit: seconds >= 0; 0 and inf mean no limit. A negative or NaN limit is a usage error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if math.isnan(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number of seconds >= 0 (0 or inf: no limit)")
    return value


SEED_MAX = 2 ** 63 - 1  # torch.manual_seed takes a 64-bit integer; a seed is a count, so 0..2^63-1


def seed(text: str) -> int:
    """--seed: an integer 0..2^63-1 (a larger one overflowed inside torch, as a traceback)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer seed (0..2^63-1)") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"{text}: a seed is an integer from 0 to 2^63-1 ({SEED_MAX})")
    return value


def positive_int(text: str) -> int:
    """A count of 1 or more (--steps, --band-runs, --nproc)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be 1 or more")
    return value


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Options every command shares (also for `python -m fusecheck.dist`)."""
    p.add_argument("--time-limit", type=seconds, default=DEFAULT_TIME_LIMIT_S, metavar="SECONDS",
                   help="stop with exit 3 (naming what was running) after this many seconds; 0 or inf: no limit")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line on the terminal")


def build_parser(command: str | None = None) -> tuple[argparse.ArgumentParser, object | None]:
    """The parser, with the arguments of `command` only (importing the other modules would cost seconds)."""
    parser = Parser(prog="fusecheck", description=DESCRIPTION, epilog=EPILOG, formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"fusecheck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    module = None
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".",
                           formatter_class=HelpFormatter)
        if name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            add_run_arguments(p)
    return parser, module


def _stop_children() -> None:
    for child in multiprocessing.active_children():
        child.terminate()
    for child in multiprocessing.active_children():
        child.join(timeout=5)
        if child.is_alive():
            child.kill()


def run_command(module, args: argparse.Namespace) -> int:
    """Validate the outputs, then run the subcommand with a time limit and progress; map errors to exit codes."""
    from fusecheck.cli.report_paths import prepare_outputs
    from fusecheck.cli.progress import Progress
    from fusecheck.cli.watchdog import Watchdog

    command = getattr(args, "command", None) or "dist"
    try:
        prepare_outputs(args)
        with Progress(command, quiet=getattr(args, "quiet", False)) as progress:
            progress.set("loading torch")
            import torch  # noqa: F401  (start-up, before the time limit starts: it bounds the work, as before)
            from fusecheck.cli.watchdog import interrupt_deadline, on_timeout
            reports = getattr(module, "timeout_reports", None)   # a command that writes reports on a timeout
            with (on_timeout(reports(args)) if reports else contextlib.nullcontext()), \
                    Watchdog(args.time_limit, command), interrupt_deadline(command):
                return module.run(args)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        _stop_children()
        print(f"\nfusecheck: interrupted; `fusecheck {command}` stopped, no verdict", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # never a verdict, never exit 1: the one mapping of fusecheck/errors.py
        from fusecheck import errors
        if errors.wants_traceback(exc):
            traceback.print_exc()
        print(errors.message(exc), file=sys.stderr)
        return errors.exit_code(exc)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        parser, module = build_parser(command if command in SUBCOMMANDS else None)
        if not argv:  # bare `fusecheck`: say what it can do; running a 30 s check unasked helps no one
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        args = parser.parse_args(argv)
        if args.command is None:  # options only, e.g. `fusecheck -q`
            parser.error("name a command: " + ", ".join(SUBCOMMANDS))
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    except KeyboardInterrupt:  # while torch was being imported
        print("\nfusecheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    try:
        return run_command(module, args)
    except KeyboardInterrupt:  # one that escaped a clean-up (a handler, a context's exit): still exit 130
        print("\nfusecheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
