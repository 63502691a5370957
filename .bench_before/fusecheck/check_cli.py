"""`fusecheck check`: the core check of one target, as table, JSON and JUnit, gated by exit code."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from fusecheck.case import load_target
from fusecheck.policy import Policy
from fusecheck.report.baseline import diff_against, load_baseline
from fusecheck.report.json_report import write_json
from fusecheck.report.junit import write_junit, write_junit_error
from fusecheck.report.table import format_report
from fusecheck.run import run_check
from fusecheck.watchdog import on_timeout


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments every model-level subcommand (check, matrix, bisect) shares."""
    p.add_argument("target", nargs="?", default=None,
                   help="FILE.py:NAME returning a Case or (model, inputs); default: built-in transformer block")
    p.add_argument("--backend", default="inductor", help="inductor (default), aot_eager, eager, or FILE.py:NAME")
    p.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default=None, help="cast model and floating inputs")
    p.add_argument("--device", default="cpu", help="cpu, cuda (npu through torch_npu)")
    p.add_argument("--seed", type=int, default=0, help="seed for model weights, inputs and cotangents")
    p.add_argument("--train", action="store_true",
                   help="also compare gradients of parameters and inputs (the model stays in eval() mode: no dropout)")
    p.add_argument("--policy", default=None, help="policy file (TOML/JSON); default: [tool.fusecheck] in pyproject.toml")
    p.add_argument("--json", dest="json_path", default=None, help="write the full report as JSON")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    p.add_argument("--disable", "--toggle", dest="toggles", default="",
                   help="comma-separated fusion toggles to apply (see `fusecheck toggles`)")
    p.add_argument("--junit", default=None, help="write JUnit XML (one testcase per output)")
    p.add_argument("--baseline", default=None,
                   help="report JSON of known failures: only new failures fail the gate")


def _error_reports(args: argparse.Namespace, case: str) -> Callable[[str, int], None]:
    """Writers of --json/--junit for a run that ends without a verdict, so CI finds a report either way
    (never over the baseline itself: it would lose the known failures)."""
    same_as_baseline = bool(args.json_path and args.baseline
                            and Path(args.json_path).resolve() == Path(args.baseline).resolve())

    def write(message: str, exit_code: int) -> None:
        if args.json_path and not same_as_baseline:
            write_json({"case": case, "status": "ERROR", "exit_code": exit_code, "error": message}, args.json_path)
        if args.junit:
            write_junit_error(case, message, args.junit)
    return write


def run(args: argparse.Namespace) -> int:
    from fusecheck.cli import USAGE_ERRORS

    error_reports = _error_reports(args, args.target or "default")
    try:
        with on_timeout(lambda message: error_reports(message, 3)):
            policy = Policy.load(args.policy)
            baseline = load_baseline(args.baseline) if args.baseline else None  # read before --json overwrites it
            case = load_target(args.target, seed=args.seed)
            toggles = [t.strip() for t in args.toggles.split(",") if t.strip()]
            report = run_check(case, backend=args.backend, dtype=args.dtype, device=args.device, train=args.train,
                               policy=policy, toggles=toggles, seed=args.seed)
    except Exception as exc:
        error_reports(f"{type(exc).__name__}: {exc}", 2 if isinstance(exc, USAGE_ERRORS) else 3)
        raise
    diff = diff_against(report, baseline) if baseline is not None else None
    gate = report.exit_code if diff is None or report.exit_code != 1 else (0 if diff.gate_passes else 1)
    print(format_report(report))
    if diff is not None:
        print("\n".join(diff.lines()))
        print(f"gate with the baseline: {'PASS' if gate == 0 else 'FAIL'} (exit {gate})")
    if args.json_path:
        data = report.to_dict()
        data["gate"] = {"exit_code": gate, "baseline": args.baseline, **(diff.to_dict() if diff else {})}
        write_json(data, args.json_path)
    if args.junit:
        write_junit(report, args.junit, known=diff.known_names if diff else frozenset())
    return gate
