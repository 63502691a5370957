"""HANG and CRASH: bounded, the rank named, the others torn down, no process left behind; ranks are reused."""
from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from fusecheck.distributed.pool import RankPool
from fusecheck.distributed.runner import check, close_pools
from fusecheck.distributed.task import CheckTask

PLANTED = "tests/planted/dist_bugs.py"
TIMEOUT_S = 2.0


def alive(pids):
    """Our rank pids that still exist (zombies included: they would be a missing join)."""
    return [p for p in pids if os.path.exists(f"/proc/{p}")]


def rank_children():
    return [c for c in multiprocessing.active_children() if c.name.startswith("fusecheck-rank")]


def test_hanging_rank_is_named_within_the_deadline():
    with RankPool(4, timeout_s=TIMEOUT_S) as pool:
        pool.start()
        pids = pool.pids()
        t0 = time.monotonic()
        rep = check(CheckTask(f"{PLANTED}:HangsOnRank", spec_kwargs={"rank": 2}, layers=("whole",)), 4, pool=pool)
        elapsed = time.monotonic() - t0
    assert rep.status == "HANG" and rep.outcome.ranks == [2] and rep.exit_code == 3
    assert "whole" in rep.outcome.phases[2]
    assert rep.diagnosis.cause == "HANG on rank(s) 2"
    # the parent's deadline is timeout + grace (2 s each); 3 s of slack for a loaded 2-core machine
    assert elapsed < TIMEOUT_S + pool.grace_s + 3
    assert alive(pids) == []


@pytest.mark.parametrize("world, bad, planted, message", [
    (2, 1, "CrashesOnRank", "planted crash on rank 1"),
    (4, 3, "CrashesOnRank", "planted crash on rank 3"),
    (4, 0, "DiesOnRank", "killed by signal SIGKILL"),
])
def test_crashing_rank_is_named_with_its_traceback(world, bad, planted, message):
    with RankPool(world, timeout_s=10) as pool:
        pool.start()
        pids = pool.pids()
        t0 = time.monotonic()
        rep = check(CheckTask(f"{PLANTED}:{planted}", spec_kwargs={"rank": bad}), world, pool=pool)
        elapsed = time.monotonic() - t0
        assert not pool.alive          # torn down at once, not left waiting for the collective timeout
    assert rep.status == "CRASH" and rep.outcome.ranks == [bad] and rep.exit_code == 3
    assert message in rep.outcome.errors[bad]["message"] + rep.outcome.errors[bad]["traceback"]
    assert elapsed < 5                 # the peers' 10 s collective timeout was not waited for
    assert alive(pids) == []


def test_ranks_are_started_once_and_reused_and_restart_after_a_crash():
    with RankPool(2, timeout_s=10) as pool:
        first = check(CheckTask("kernels/ag_gemm.py:AllGatherGemm"), 2, pool=pool)
        pids = pool.pids()
        second = check(CheckTask("kernels/gemm_rs.py:GemmReduceScatter"), 2, pool=pool)
        assert first.status == second.status == "PASS" and pool.pids() == pids
        crashed = check(CheckTask(f"{PLANTED}:CrashesOnRank"), 2, pool=pool)
        assert crashed.status == "CRASH" and alive(pids) == []
        again = check(CheckTask("kernels/ag_gemm.py:AllGatherGemm"), 2, pool=pool)
        assert again.status == "PASS" and set(pool.pids()).isdisjoint(pids)


def test_no_rank_process_outlives_the_pools():
    check(CheckTask("kernels/ag_gemm.py:AllGatherGemm", layers=("comm",)), 2)   # a cached pool exists
    assert rank_children()
    close_pools()
    assert rank_children() == []


def test_hang_is_named_even_when_the_waiting_ranks_do_not_time_out():
    """NCCL's peers do not raise at a timeout (its watchdog aborts them later): all ranks fall silent. The
    culprit is the one that issued fewer dist calls in the stuck phase than the peers waiting for it."""
    with RankPool(2, timeout_s=TIMEOUT_S) as pool:
        pool.pg_timeout_s = 60          # peers would wait a minute: only the parent's deadline can end this
        pool.start()
        pids = pool.pids()
        rep = check(CheckTask(f"{PLANTED}:HangsOnRank", spec_kwargs={"rank": 0}, layers=("whole",)), 2, pool=pool)
    assert rep.status == "HANG" and rep.outcome.ranks == [0], rep.outcome.detail
    assert "rank 1 " in rep.outcome.detail and rep.outcome.errors == {}
    assert alive(pids) == []
