"""Reports for a run that ends without a verdict (a usage error, a crash, a timeout, a failed rank), so that CI
finds --json/--junit/--html either way; and the stable target name their suites carry. Shared by `check`,
its sharded launcher, `op` and `train`."""
from __future__ import annotations

import argparse
import contextlib
import re
import time
from pathlib import Path
from typing import Callable, Iterator


def target_id(target: str | None) -> str:
    """A name for the target that does not depend on how the run ended: `models/mlp.py:build` -> `mlp.build`.
    JUnit suite names use it so that CI history follows one target across pass, fail, error and timeout."""
    if not target:
        return "default"
    where, _, attr = target.rpartition(":")
    stem = Path(where).stem if where.endswith(".py") else where
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{stem}.{attr}" if where else target).strip("_") or "target"


def error_reports_for(args: argparse.Namespace, started: float) -> Callable[[str, int], None]:
    """Writers of --json/--junit/--html for a run that ends without a verdict, so CI finds a report either
    way (never over the baseline itself: it would lose the known failures)."""
    same_as_baseline = bool(args.json_path and args.baseline
                            and Path(args.json_path).resolve() == Path(args.baseline).resolve())

    def write(message: str, exit_code: int) -> None:
        import sys

        from fusecheck.cli.report_paths import ReportWriteError, write_reports
        from fusecheck.report.html import write_html
        from fusecheck.report.json_report import write_json
        from fusecheck.report.junit import write_junit_error
        data = {"case": args.target or "default", "status": "ERROR", "exit_code": exit_code, "error": message}
        try:
            write_reports([
                ("--json", not same_as_baseline and args.json_path, lambda: write_json(data, args.json_path)),
                ("--junit", args.junit, lambda: write_junit_error(target_id(args.target), message, args.junit,
                                                                  seconds=time.monotonic() - started)),
                ("--html", args.html, lambda: write_html("check", data, args.html))])
        except ReportWriteError as exc:  # said here; the run's own error is what ends it
            print(f"fusecheck: error: {exc}", file=sys.stderr)
    return write


@contextlib.contextmanager
def reported_on_failure(error_reports: Callable[[str, int], None]) -> Iterator[None]:
    """A run ended by an exception or Ctrl-C still leaves its error reports (exit 2 for the user's mistake, 130
    for Ctrl-C, else 3); the exception goes on to the command line's one mapping."""
    from fusecheck.errors import EXIT_INTERRUPTED, exit_code
    try:
        yield
    except KeyboardInterrupt:
        error_reports("interrupted (Ctrl-C)", EXIT_INTERRUPTED)
        raise
    except Exception as exc:
        error_reports(f"{type(exc).__name__}: {exc}", exit_code(exc))
        raise
