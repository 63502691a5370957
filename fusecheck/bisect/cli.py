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
from fusecheck.bisect.objective import TrialOptions
from fusecheck.bisect.report import format_result, write_json
from fusecheck.bisect.search import bisect
from fusecheck.case import TargetError, load_target
from fusecheck.policy import Policy


def add_arguments(p: argparse.ArgumentParser) -> None:
    try:
        from fusecheck.check_cli import add_common_arguments
        add_common_arguments(p)
    except ImportError:  # pragma: no cover - standalone use
        p.add_argument("target", nargs="?", default=None)
        p.add_argument("--backend", default="inductor")
        p.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default=None)
        p.add_argument("--device", default="cpu")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--train", action="store_true")
        p.add_argument("--policy", default=None)
        p.add_argument("--json", dest="json_path", default=None)
    p.add_argument("--max-compiles", type=int, default=40, help="compile budget (each probe is one compile)")
    p.add_argument("--kinds", default=",".join(GATES),
                   help=f"decision families to search, comma-separated (default: all: {','.join(GATES)})")
    p.add_argument("--no-attribution", action="store_true", help="skip the per-kernel attribution")
    p.add_argument("--html", default=None, metavar="FILE",
                   help="write a self-contained HTML report of the bisect chain")
    p.add_argument("--repro", default=None, metavar="OUT.py",
                   help="write a standalone torch-only script reproducing the failing subgraph's error ratio")


def run(args: argparse.Namespace) -> int:
    if args.max_compiles < 1:
        raise TargetError("--max-compiles must be at least 1")
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in GATES]
    if unknown:
        raise TargetError(f"unknown decision families {unknown}; known: {', '.join(GATES)}")
    policy = Policy.load(args.policy)
    case = load_target(args.target, seed=args.seed)
    opts = TrialOptions(dtype=args.dtype, device=args.device, train=args.train, seed=args.seed, policy=policy,
                        kinds=kinds)
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    backend = getattr(args, "backend", "inductor") or "inductor"
    if backend != "inductor":   # another compiler: its decisions are opaque, the graph is split instead
        resolve_backend(backend)  # unknown backend: one line, exit 2
        result = bisect_backend(case, backend, opts, max_compiles=args.max_compiles, repro=args.repro,
                                progress=progress)
    else:
        result = bisect(case, opts, max_compiles=args.max_compiles, attribution=not args.no_attribution,
                        progress=progress, repro=args.repro)
    print(format_result(result))
    if args.json_path:
        write_json(result, args.json_path)
    if args.html:
        from fusecheck.report.html import write_html
        write_html("bisect", result.to_dict(), args.html)
    return result.exit_code
