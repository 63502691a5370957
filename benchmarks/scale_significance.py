"""How close each row of one check came to failing `scale_error` (or `--check offset_error`) on its significance
test, not only its ratio.

    python benchmarks/scale_significance.py models/families.py:any_esm_8 --dtype bf16 --seed 8 [--train] [--rows 8]
        [--check scale_error|offset_error]

Why: a row's `scale_error` margin in the JSON is its ratio to the bound, and on `--train` runs small gradients
and key-bias gradients (zero in exact arithmetic) pass that bound often; the significance test decides. This
prints, per row over the bound, z over the critical value (1 or more is a FAIL before the family settles it),
the ratio, the element count and both slopes (compare/verdict.py `systematic_excess`, the verdict's own test).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from statistics import NormalDist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fusecheck.case import load_target  # noqa: E402
from fusecheck.check import run_check  # noqa: E402
from fusecheck.compare.verdict import RATIO_CHECKS, SYSTEMATIC, Judged, systematic_excess  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--check", default="scale_error", choices=sorted(SYSTEMATIC))
    args = ap.parse_args(argv)
    report = run_check(load_target(args.target), dtype=args.dtype, train=args.train, seed=args.seed)
    ratios = report.policy.ratios
    kind, metric = SYSTEMATIC[args.check], args.check
    critical = NormalDist().inv_cdf(1 - getattr(ratios, kind.alpha))
    out = []
    for row in report.rows:
        c, e = row.vs_golden, row.reference_vs_golden
        if c is None or e is None or row.applied is None or not row.applied.abs_max:
            continue
        floor = RATIO_CHECKS[metric].floor(row.applied.tolerance, e)
        unit = kind.unit(Judged(row.applied.tolerance, report.policy, int(c.numel), abs_max=row.applied.abs_max))
        bound, _, z = systematic_excess(metric, c, e, floor, unit, ratios)
        ours, theirs = getattr(c, metric), getattr(e, metric)
        out.append((z / critical, ours / bound if bound else math.inf, row.name, int(c.numel), ours, theirs,
                    row.verdict.status.value))
    print(f"{args.target} {args.dtype} seed {args.seed}{' --train' if args.train else ''}: {report.status}")
    for t in sorted(out, reverse=True)[:args.rows]:
        print("z/critical %5.2f  ratio %6.2f  %-70s n=%-7d value %.3g (eager %.3g)  %s" % t)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
