"""Running under torchrun (real devices): every process is one rank, there is no parent to keep deadlines,
so each rank runs a watchdog that names its own stuck phase and exits 3; results are gathered to rank 0,
which prints the report and writes the JSON."""
from __future__ import annotations

import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

from fusecheck.distributed.backends import Backend
from fusecheck.distributed.pool import Outcome, is_secondary
from fusecheck.distributed.task import CheckTask, run_check
from fusecheck.distributed.worker import _describe, fill_uninitialized_with_nan


class Watchdog:
    """Exit 3 with the rank and phase named when a phase makes no progress for `limit_s`."""

    def __init__(self, rank: int, limit_s: float):
        self.rank, self.limit_s, self.phase, self.since = rank, limit_s, "start", time.monotonic()
        self._stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def progress(self, phase: str) -> None:
        self.phase, self.since = phase, time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            if time.monotonic() - self.since > self.limit_s:
                print(f"fusecheck dist: HANG: rank {self.rank} made no progress for {self.limit_s:.0f} s in phase "
                      f"{self.phase!r}", file=sys.stderr, flush=True)
                os._exit(3)


def run_under_torchrun(planned: list, backend: Backend, args) -> int:
    """Every planned check in turn on one process group; rank 0 prints the reports and the summary."""
    from fusecheck.distributed.report import finish
    local = int(os.environ.get("LOCAL_RANK", 0))
    backend.prepare(local)
    if not dist.is_initialized():
        dist.init_process_group(backend.name, timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    fill_uninitialized_with_nan(torch)
    dog = Watchdog(rank, args.timeout + max(2.0, 0.25 * args.timeout))
    reports, failed = {}, False
    for p in planned:
        if p.task is None:
            continue
        rep, error = _run_one(p.task, backend, world, rank, local, dog)
        failed |= error
        if rep is not None:
            reports[p.ref] = rep
    code = finish(planned, reports, args) if rank == 0 else (3 if failed else 0)
    dog.progress("shut down")
    dist.barrier()                 # nobody exits while a peer still talks to it (gloo aborts then)
    dist.destroy_process_group()
    dog.stop()
    return code


def _run_one(task: CheckTask, backend: Backend, world: int, rank: int, local: int, dog: Watchdog):
    """One check on this rank; its results gathered to rank 0, which builds the report (others get None)."""
    results, error, t0 = [], None, time.monotonic()

    def emit(kind, payload):
        if kind == "enter":
            dog.progress(payload)
        elif kind == "result":
            results.append(payload)
    try:
        run_check(task, rank, world, dist.group.WORLD, backend.device(local), emit)
    except Exception as exc:
        error = _describe(exc)
        error["secondary"] = is_secondary(error)
    dog.progress("gather results to rank 0")
    gathered = [None] * world if rank == 0 else None
    dist.gather_object((results, error), gathered, dst=0)
    rep = _report(task, backend, world, gathered, t0) if rank == 0 else None
    return rep, error is not None


def _report(task: CheckTask, backend: Backend, world: int, gathered: list, t0: float):
    from fusecheck.distributed.runner import build_report
    from fusecheck.distributed.spec import load_spec
    all_results = [r for res, _ in gathered for r in res]
    errors = {r: e for r, (_, e) in enumerate(gathered) if e}
    primary = sorted(r for r, e in errors.items() if not e["secondary"])
    if errors:
        culprits = primary or sorted(errors)
        first = errors[culprits[0]]
        outcome = Outcome("CRASH" if primary else "HANG", culprits, f"rank {culprits[0]}: {first['type']}: "
                          f"{first['message']}", "", {}, errors, all_results, time.monotonic() - t0)
    else:
        outcome = Outcome("ok", results=all_results, elapsed_s=time.monotonic() - t0)
    return build_report(task, load_spec(task.spec_ref, **task.spec_kwargs), world, backend.name, outcome,
                        time.monotonic() - t0)
