"""`fusecheck dist` benchmarks.

    python benchmarks/dist.py [--checks 20] [--spawn-checks 3] [--out table.md]      # start-up overhead
    python benchmarks/dist.py --races [--repeat 20] [--out races.md]                   # race rates vs stress

Overhead: ranks started once and reused vs ranks started for every check. One "check" is a small real one
(all-gather + GEMM, one shape, all three layers, one repeat), so the numbers include the work itself.

Race rates: each planted race of tests/planted/dist_bugs.py, failed layer-1 and whole-kernel repeats out of
(repeats x default shapes), plain, under the old stress (a random 0..max sleep before every call on every
rank, replacing the plain run; emulated here) and under `--stress` (each repeat: the plain run plus a run with
one straggler rank whose calls draw placement/magnitude/no delay; a repeat fails if either run fails).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # kernels/ is imported from the repo root

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
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


RACES = [("MissingWait", {}), ("SharedRecvBuffer", {}), ("ReadsAllReduceBeforeWait", {}),
         ("P2PAllGather", {"wait_send": False}), ("P2PAllGather", {"wait_send": False, "work_ms": 1.0})]


@contextlib.contextmanager
def old_stress():
    """The stress before issue 10: every rank sleeps uniform(0, max) before every dist call (emulated with
    today's wrappers: every rank is a straggler, and the only placement is before the call)."""
    from fusecheck.distributed import layers, stress
    orig, placements = layers.injected_delays, dict(stress.PLACEMENTS)

    def every_rank(cfg, rank, on_call=None):
        return orig(dataclasses.replace(cfg, straggler=rank) if cfg else None, rank, on_call)
    stress.PLACEMENTS.clear()
    stress.PLACEMENTS["before_call"] = (True, False)
    layers.injected_delays = every_rank
    try:
        yield
    finally:
        layers.injected_delays = orig
        stress.PLACEMENTS.clear()
        stress.PLACEMENTS.update(placements)


def _repeats_failed(summary) -> str:
    """Failed (shape, repeat) pairs: under --stress a repeat is a plain run plus a stressed one."""
    failed, all_ = set(), set()
    for shape, rep, _variant, bad in summary.run_outcomes:
        all_.add((shape, rep))
        if bad:
            failed.add((shape, rep))
    return f"{len(failed)}/{len(all_)}"


def race_rates(repeat: int, worlds=(2, 4)) -> str:
    from fusecheck.distributed.runner import close_pools
    rows = []
    for world in worlds:
        for cls, kw in RACES:
            cells = []
            for mode in ("plain", "old stress", "stress"):
                close_pools()      # ranks fork from this process: the old-stress patch must be in place first
                with old_stress() if mode == "old stress" else contextlib.nullcontext():
                    rep = check(CheckTask(f"tests/planted/dist_bugs.py:{cls}", spec_kwargs=kw, repeat=repeat,
                                          stress=mode != "plain", layers=("comm", "whole")), world)
                    close_pools()
                cells.append(", ".join(_repeats_failed(rep.layers[name]) for name in ("comm", "whole")))
            args = ", ".join(f"{k}={v}" for k, v in kw.items())
            rows.append([world, f"{cls}({args})" if args else cls, *cells])
    return tabulate(rows, ["ranks", "planted race", "plain (layer 1, whole)", "old stress: sleep before every "
                           "call", "--stress: plain + straggler run"], tablefmt="github")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--checks", type=int, default=20)
    ap.add_argument("--spawn-checks", type=int, default=3)
    ap.add_argument("--races", action="store_true", help="measure planted races' failure rates, plain vs stress")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.races:
        table = race_rates(args.repeat) + f"\n\nmachine: {os.cpu_count()} CPU cores, gloo, --repeat {args.repeat}\n"
        print(table)
        if args.out:
            Path(args.out).write_text(table)
        return 0
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
