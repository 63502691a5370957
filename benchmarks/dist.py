"""Per-check overhead of `fusecheck dist`: ranks started once and reused vs ranks started for every check.

    python benchmarks/dist.py [--checks 20] [--spawn-checks 3] [--out table.md]

One "check" is a small real one (all-gather + GEMM, one shape, all three layers, one repeat), so the
numbers include the work itself; the difference between the rows is what starting ranks costs.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # kernels/ is imported from the repo root

import argparse  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from tabulate import tabulate  # noqa: E402

from fusecheck.distributed.pool import RankPool  # noqa: E402
from fusecheck.distributed.runner import check  # noqa: E402
from fusecheck.distributed.task import CheckTask  # noqa: E402

TASK = CheckTask("kernels/ag_gemm.py:AllGatherGemm", shapes=[{"m": 7, "k": 12, "n": 5}])


def reused(world: int, n: int) -> list[float]:
    with RankPool(world) as pool:
        pool.start()
        check(TASK, world, pool=pool)               # warm-up: first-call costs inside the ranks
        return [_timed(lambda: check(TASK, world, pool=pool)) for _ in range(n)]


def fresh(world: int, n: int, method: str) -> list[float]:
    def one():
        with RankPool(world, start_method=method) as pool:
            rep = check(TASK, world, pool=pool)
        assert rep.status == "PASS"
    return [_timed(one) for _ in range(n)]


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--checks", type=int, default=20)
    ap.add_argument("--spawn-checks", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = []
    for world in (2, 4):
        base = statistics.median(reused(world, args.checks))
        rows.append([world, "reused pool (fork once)", args.checks, f"{base * 1e3:.0f}", "1.0x"])
        for method, n in (("fork", args.checks // 2), ("spawn", args.spawn_checks)):
            t = statistics.median(fresh(world, n, method))
            rows.append([world, f"new ranks per check ({method})", n, f"{t * 1e3:.0f}", f"{t / base:.1f}x"])
    table = tabulate(rows, ["ranks", "how ranks are started", "checks", "median per check (ms)", "vs reused"],
                     tablefmt="github")
    note = f"\n\nmachine: {os.cpu_count()} CPU cores, gloo; check = {TASK.spec_ref} {TASK.shapes[0]}, 3 layers\n"
    print(table + note)
    if args.out:
        Path(args.out).write_text(table + note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
