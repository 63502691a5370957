"""`fusecheck check`: the core check of one target, as table, JSON and JUnit, gated by exit code."""
from __future__ import annotations

import argparse

from fusecheck.case import load_target
from fusecheck.policy import Policy
from fusecheck.report.baseline import diff_against, load_baseline
from fusecheck.report.json_report import write_json
from fusecheck.report.junit import write_junit
from fusecheck.report.table import format_report
from fusecheck.run import run_check


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


def run(args: argparse.Namespace) -> int:
    policy = Policy.load(args.policy)
    case = load_target(args.target, seed=args.seed)
    toggles = [t.strip() for t in args.toggles.split(",") if t.strip()]
    report = run_check(case, backend=args.backend, dtype=args.dtype, device=args.device, train=args.train,
                       policy=policy, toggles=toggles, seed=args.seed)
    print(format_report(report))
    if args.json_path:
        write_json(report.to_dict(), args.json_path)
    if args.junit:
        write_junit(report, args.junit)
    if args.baseline and report.exit_code == 1:
        diff = diff_against(report, load_baseline(args.baseline))
        print("\n".join(diff.lines()))
        return 0 if diff.gate_passes else 1
    return report.exit_code
