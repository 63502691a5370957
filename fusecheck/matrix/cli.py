"""`fusecheck matrix`'s arguments and command. Torch-free at import: `fusecheck matrix -h` answers at once.

Exit code: the baseline's (0 pass, 1 fail); toggle rows (their promises and the interaction search
included) are diagnostic. Unknown or unsupported toggles asked for by name, and non-Inductor backends, exit 2.
"""
from __future__ import annotations

import argparse
from typing import Any, Callable


def add_arguments(p: argparse.ArgumentParser) -> None:
    from fusecheck.cli.check import add_common_arguments, add_html_argument

    add_common_arguments(p)
    p.add_argument("--toggles", "--toggle", dest="toggles", default=None, metavar="NAME[,NAME]",
                   help="comma-separated toggles, one row each (default: every toggle that applies to the "
                        "target; see `fusecheck toggles`)")
    p.add_argument("--all-together", action="store_true",
                   help="add a row with all the toggles at once; when it is worse than every single row, "
                        "leave-one-out and pair rows name the smallest set of toggles that makes it worse")
    add_html_argument(p)


def run(args: argparse.Namespace, run_matrix: Callable[..., Any]) -> int:
    from fusecheck.case import load_target, refuse_meta
    from fusecheck.cli.report_paths import write_reports
    from fusecheck.toggles import ToggleError
    from fusecheck.policy import Policy
    from fusecheck.report.json_report import write_json

    toggles = None if args.toggles is None else [t.strip() for t in args.toggles.split(",") if t.strip()]
    if toggles is not None and not toggles:
        raise ToggleError("--toggles is empty; leave it out for every applicable toggle")
    from fusecheck.cli.progress import quiet_compiler_logs
    from fusecheck.cli.watchdog import phase

    phase(f"loading the target {args.target or '(built-in transformer block)'}")
    case = load_target(args.target, seed=args.seed)
    refuse_meta(case)
    with quiet_compiler_logs(not args.verbose):
        report = run_matrix(case, toggles, all_together=args.all_together, backend=args.backend, dtype=args.dtype,
                            device=args.device, train=args.train, policy=Policy.load(args.policy), seed=args.seed)
    data = report.to_dict()
    from fusecheck.report.html import write_html
    write_reports([("--json", args.json_path, lambda: write_json(data, args.json_path)),  # before the verdict
                   ("--html", args.html, lambda: write_html("matrix", data, args.html))],
                  verdict=f"{report.baseline.report.status if report.baseline.report else 'ERROR'} "
                          f"(exit {report.exit_code})")
    from fusecheck.report.table import _wrap
    dtype = args.dtype or "the model’s own"
    print("\n".join(_wrap(f"fusecheck matrix: {case.name}  backend={args.backend}  dtype={dtype}  "
                          f"device={args.device}  train={args.train}", "")))
    print(report.table())
    return report.exit_code
