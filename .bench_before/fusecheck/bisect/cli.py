"""`fusecheck bisect TARGET`: name the compiler decisions that make compiled worse than eager.

Exit codes: 0 the target already passes; 1 culprits found (the target fails; with them held off it passes,
or they are the partial culprits found before the budget ran out); 2 bad usage or input; 3 no culprit
found within --max-compiles, a nondeterministic target, or a tool/compiler error.
"""
from __future__ import annotations

import argparse
import sys

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


def run(args: argparse.Namespace) -> int:
    if getattr(args, "backend", "inductor") != "inductor":
        raise TargetError("bisect searches Inductor's decisions: --backend must be inductor")
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
    result = bisect(case, opts, max_compiles=args.max_compiles, attribution=not args.no_attribution,
                    progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_result(result))
    if args.json_path:
        write_json(result, args.json_path)
    return result.exit_code
