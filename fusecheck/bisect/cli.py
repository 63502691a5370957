"""`fusecheck bisect TARGET`: name the compiler decisions that make compiled worse than eager.

Exit codes: 0 the target already passes; 1 culprits found (the target fails; with them held off it passes,
or they are the partial culprits found before the budget ran out); 2 bad usage or input; 3 no culprit
found within --max-compiles, a nondeterministic target, or a tool/compiler error.
"""
from __future__ import annotations

import argparse
import sys

from fusecheck.backends import resolve_backend
from fusecheck.bisect.backend_bisect import bisect_backend
from fusecheck.bisect.gates import GATES
from fusecheck.bisect.report import format_result
from fusecheck.bisect.search import bisect
from fusecheck.case import TargetError, load_target, refuse_meta
from fusecheck.check import CheckOptions
from fusecheck.cli.report_paths import write_reports
from fusecheck.policy import Policy


def run(args: argparse.Namespace) -> int:
    if args.max_compiles < 1:
        raise TargetError("--max-compiles must be at least 1")
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in GATES]
    if unknown:
        raise TargetError(f"unknown decision families {unknown}; known: {', '.join(GATES)}")
    policy = Policy.load(args.policy)
    case = load_target(args.target, seed=args.seed)
    refuse_meta(case)
    opts = CheckOptions.from_args(args, policy=policy)
    if opts.toggles:
        from fusecheck.toggles import resolve
        for t in resolve(opts.toggles):  # an unknown or unsupported toggle: exit 2 before any compile
            t.check()
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    backend = getattr(args, "backend", "inductor") or "inductor"
    if backend != "inductor":   # another compiler: its decisions are opaque, the graph is split instead
        resolve_backend(backend)  # unknown backend: one line, exit 2
        result = bisect_backend(case, backend, opts, max_compiles=args.max_compiles, repro=args.repro,
                                progress=progress)
    else:
        result = bisect(case, opts, kinds=kinds, max_compiles=args.max_compiles, attribution=not args.no_attribution,
                        progress=progress, repro=args.repro)
    from fusecheck.report.html import write_html
    data = {**result.to_dict(), "toggles": list(opts.toggles)}
    write_reports([("--json", args.json_path, lambda: write_json(data, args.json_path)),  # before the verdict
                   ("--html", args.html, lambda: write_html("bisect", data, args.html))],
                  verdict=f"{result.status.upper()} (exit {result.exit_code})")
    if opts.toggles:
        print(f"bisect from a toggled build: every trial compiled with {', '.join(opts.toggles)}")
    print(format_result(result))
    return result.exit_code


def write_json(data: dict, path: str) -> None:
    """The bisect report (bisect/report.py's JSON) with the toggles it was compiled under."""
    import json

    from fusecheck.report.json_report import write_json as write_report_json
    write_report_json(json.loads(json.dumps(data, default=str)), path)
