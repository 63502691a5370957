"""Regression tests for defects found in review of `fusecheck dist` (planted kernels: tests/planted/dist_bugs.py).
Each test plants the bug that broke the tool and fails without its fix."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from fusecheck.distributed import stress, workspace
from fusecheck.distributed.entry import main
from fusecheck.distributed.diagnosis import Facts, diagnose
from fusecheck.distributed.pool import RankPool
from fusecheck.distributed.report import render
from fusecheck.distributed.runner import check
from fusecheck.distributed.summary import LayerSummary
from fusecheck.distributed.collectives import COLLECTIVES
from fusecheck.distributed.tags import MOVE, SUM, explain
from fusecheck.distributed.task import CheckTask

ROOT = Path(__file__).resolve().parents[2]
PLANTED = "tests/planted/dist_bugs.py"
AG = "kernels/ag_gemm.py:AllGatherGemm"
SMALL = [{"m": 4, "k": 3, "n": 2}]


def run(cls, world=2, **kw):
    return check(CheckTask(f"{PLANTED}:{cls}", **kw), world)


# ---- 1. one stress wrapper per function: P2POp + batch_isend_irecv ------------------------------------------

def test_p2pop_is_accepted_inside_the_stress_wrappers():
    import torch.distributed.distributed_c10d as c10d
    with stress.injected_delays(stress.StressConfig(max_delay_ms=0), rank=0, on_call=lambda name: None):
        assert dist.isend is c10d.isend and dist.irecv is c10d.irecv
        c10d._check_op(dist.isend)     # what P2POp(dist.isend, ...) runs: raised "Invalid ``op``" (two wrappers)
        c10d._check_op(dist.irecv)
    assert dist.isend is c10d.isend and not hasattr(dist.isend, "__wrapped__")   # restored


@pytest.mark.parametrize("batch, stressed", [(1, False), (1, True), (0, True)])
def test_batch_isend_irecv_kernel_passes(batch, stressed):
    rep = check(CheckTask(f"{PLANTED}:RingAllGatherP2P", spec_kwargs={"batch": batch}, repeat=3 if stressed else 1,
                          stress=stressed, max_delay_ms=2), 2, timeout_s=10)
    assert rep.status == "PASS", render(rep)


# ---- 2. +-Inf in layer 1 is garbage, and the poison is finite in every dtype -------------------------------

@pytest.mark.parametrize("scheme", [MOVE, SUM])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_non_finite_values_decode_as_garbage(scheme, dtype):
    plan = scheme.plan(dtype, 2, 4)
    specials = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0], dtype=dtype)
    kinds = [o.kind for o in plan.decode([specials] * plan.subruns)]
    assert kinds == ["garbage", "garbage", "unwritten", "unwritten"]
    deliver = COLLECTIVES["all_gather" if scheme is MOVE else "all_reduce"].deliver
    tags = [plan.encode(r, (4,)) for r in range(2)]
    expected = [deliver([t[j] for t in tags], 0) for j in range(plan.subruns)]
    got = [e.clone() for e in expected]
    got[0][1], got[-1][2] = float("inf"), float("-inf")
    lines, classes = explain(got, expected, plan, 1, 1, 0)
    assert classes == {"garbage": 2} and lines


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_workspace_poison_is_finite_and_never_a_tag(dtype):
    workspace.clear()
    try:
        buf = workspace.buffer("review.poison", (4096,), dtype)
        workspace.poison_all(123)
        assert torch.isfinite(buf).all()
        for scheme in (MOVE, SUM):
            plan = scheme.plan(dtype, 2, 2048)
            assert all(o.kind == "garbage" for o in plan.decode([buf] * plan.subruns)), scheme.name
    finally:
        workspace.clear()


def test_missing_wait_in_fp16_under_stress_is_a_failure_not_a_crash():
    rep = run("MissingWait", repeat=6, stress=True, dtype="float16", shapes=[{"m": 8, "k": 16, "n": 8}])
    assert rep.status == "FAIL" and rep.exit_code == 1, render(rep)
    assert rep.layers["comm"].classes.get("garbage"), render(rep)
    assert rep.diagnosis.cause.startswith("synchronization"), render(rep)


# ---- 3. poison seeded per shape, not per repeat: a never-written slot is layout, not a race ----------------

def test_never_written_workspace_slot_is_layout_not_a_race():
    rep = run("StagingOffByOne", repeat=4, shapes=[{"m": 4, "k": 3, "n": 2}])
    assert rep.layers["comm"].status == "FAIL" and rep.layers["compute"].status == "PASS", render(rep)
    assert rep.layers["comm"].nondeterministic_shapes == [], render(rep)
    assert rep.diagnosis.cause.startswith("communication"), render(rep)
    assert not any(f.cause.startswith("synchronization") for f in rep.diagnosis.findings)


# ---- 4. only backend errors count as a peer's side effect ---------------------------------------------------

def test_backend_raised_only_for_communication_errors():
    from fusecheck.distributed.worker import backend_raised
    assert backend_raised(RuntimeError("gloo: Timed out"))
    assert backend_raised(dist.DistBackendError("peer closed"))
    assert not backend_raised(ValueError("peer's tile size"))
    assert not backend_raised(TimeoutError("flag never set"))
    assert not backend_raised(NotImplementedError("socket"))


@pytest.mark.parametrize("kind", ["ValueError", "TimeoutError"])
def test_a_ranks_own_exception_is_its_crash_even_if_it_mentions_a_peer(kind):
    t0 = time.monotonic()
    rep = check(CheckTask(f"{PLANTED}:RaisesOnRank", spec_kwargs={"rank": 1, "kind": kind}, layers=("whole",),
                          shapes=SMALL), 2, timeout_s=10)
    assert rep.status == "CRASH" and rep.outcome.ranks == [1], render(rep)
    assert rep.diagnosis.cause == "CRASH on rank(s) 1"
    assert time.monotonic() - t0 < 5    # not after rank 0's 10 s collective timeout


# ---- 5. every rank timed out: the rank whose dist calls differ is named ------------------------------------

def test_odd_ones_out_by_phase_and_calls():
    from fusecheck.distributed.pool import _Rank, odd_ones_out

    def ranks(*calls, phases=None):
        return {r: _Rank(phase=(phases or {}).get(r, "p"), calls=c) for r, c in enumerate(calls)}
    assert odd_ones_out(ranks(2, 1, 2, 2)) == [1]
    assert odd_ones_out(ranks(2, 1)) == [1]
    assert odd_ones_out(ranks(2, 2)) == []
    assert odd_ones_out(ranks(3, 3, 3, 3, phases={2: "q"})) == [2]


def test_deadlock_names_the_rank_that_made_fewer_calls():
    rep = check(CheckTask(f"{PLANTED}:DeadlockOnRank", spec_kwargs={"rank": 1}, layers=("whole",), shapes=SMALL),
                4, timeout_s=1.5)
    assert rep.status == "HANG" and rep.outcome.ranks == [1], render(rep)
    assert rep.diagnosis.cause == "HANG on rank(s) 1"


# ---- 6. identical inputs on every rank hide a misrouted block: ERROR, never PASS ----------------------------

def test_inputs_that_are_not_rank_distinct_are_an_error():
    rep = run("SameInputsMisroutedFused", shapes=SMALL)
    assert rep.status == "ERROR" and rep.exit_code == 2, render(rep)
    assert "inputs_not_rank_distinct" in rep.layers["compute"].codes
    assert rep.diagnosis.cause.startswith("no verdict")
    assert "inputs are not rank-distinct: a misrouted block cannot be seen" in " ".join(render(rep).split())  # wrapped at 120


# ---- 7. usage checked before ranks start; replayable seeds; diagnosis wording -------------------------------

@pytest.mark.parametrize("argv, message", [
    ([AG, "--shape", "m=5,k=4"], "missing name(s) ['n']"),
    ([AG, "--shape", "m=5,k=4,n=3,x=2"], "unknown name(s) ['x']"),
    ([AG, "--shape", "m=5,k=4,n=three"], "integer"),
    ([AG, "--max-delay-ms", "-1"], "--max-delay-ms"),
    ([AG, "--timeout", "inf"], "--timeout"),
])
def test_bad_usage_is_exit_2_before_any_rank_starts(argv, message, capsys, monkeypatch):
    def no_ranks(self):
        raise AssertionError("a rank was started")
    monkeypatch.setattr(RankPool, "start", no_ranks)
    assert main(argv + ["--world-size", "2"]) == 2
    assert message in capsys.readouterr().err


_REPLAY = """
import time
import torch.distributed as dist
from fusecheck.distributed import stress
slept = []
time.sleep = slept.append
with stress.injected_delays(stress.StressConfig(20.0, 7, 0, straggler=1), rank=1):
    for _ in range(12):
        try:
            dist.all_reduce(None)      # the delay comes first; the call itself then fails (no process group)
        except Exception:
            pass
print(slept, stress.stable_seed(7, 0, "fused"))
"""


def test_stress_delays_and_poison_seeds_replay_across_processes():
    outs = []
    for hashseed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-c", _REPLAY], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append(proc.stdout)
    assert outs[0] == outs[1] and outs[0].count(",") >= 2


def test_rank_subset_wording_when_every_rank_fails_in_some_run():
    def s(name, status, **kw):
        return LayerSummary(name, status, runs=2, failed_runs=2 if status == "FAIL" else 0, **kw)
    whole = s("whole", "FAIL", ranks_per_failed_run=[[0], [1]], failing_ranks=[0, 1], codes={"fail": 2})
    facts = Facts(s("comm", "PASS"), s("compute", "PASS"), whole, {"status": "PASS"}, "ok", [], "", 2)
    d = diagnose(facts)
    assert d.cause.startswith("layout / rank order")
    assert "passes on the others" not in d.findings[0].evidence
    assert "only some ranks in every failing run" in d.findings[0].evidence


# ---- 8. a race is not hidden by a compute failure elsewhere; a livelock is a HANG ---------------------------

def test_race_is_reported_even_when_layer_2_fails_on_another_shape():
    def s(name, status, outcomes, **kw):
        failed = sum(o[3] for o in outcomes)
        return LayerSummary(name, status, runs=len(outcomes), failed_runs=failed, run_outcomes=outcomes, **kw)
    # shape 1: compute wrong on every repeat (whole always fails there); shape 0: whole fails on repeat 2 only,
    # with layer 2 passing on those inputs
    compute = s("compute", "FAIL", [[0, r, "finite", False] for r in range(4)] + [[1, r, "finite", True] for r in range(4)],
                codes={"fail": 4})
    whole = s("whole", "FAIL", [[0, r, "", r == 2] for r in range(4)] + [[1, r, "", True] for r in range(4)],
              intermittent_shapes=[0], ranks_per_failed_run=[[0, 1]] * 5, failing_ranks=[0, 1], codes={"fail": 5})
    comm = s("comm", "PASS", [[sh, r, "", False] for sh in (0, 1) for r in range(4)])
    d = diagnose(Facts(comm, compute, whole, {"status": "PASS"}, "ok", [], "", 2))
    assert d.cause.startswith("synchronization"), d
    # a data-dependent compute bug (layer 2 fails on exactly the failing runs) is still not a race
    compute2 = s("compute", "FAIL", [[0, r, "finite", r == 2] for r in range(4)] + [[0, 0, "nan_inf:a", False]],
                 codes={"fail": 1})
    whole2 = s("whole", "FAIL", [[0, r, "", r == 2] for r in range(4)], intermittent_shapes=[0],
               ranks_per_failed_run=[[0, 1]], failing_ranks=[0, 1], codes={"fail": 1})
    comm2 = s("comm", "PASS", [[0, r, "", False] for r in range(4)])
    assert diagnose(Facts(comm2, compute2, whole2, {"status": "PASS"}, "ok", [], "", 2)).cause == "compute"


def test_livelock_that_keeps_calling_collectives_is_a_hang():
    with RankPool(2, timeout_s=1.0, phase_limit_s=3.0) as pool:
        t0 = time.monotonic()
        rep = check(CheckTask(f"{PLANTED}:Livelock", layers=("whole",), shapes=SMALL), 2, pool=pool)
        elapsed = time.monotonic() - t0
        assert not pool.alive
    assert rep.status == "HANG" and rep.outcome.ranks == [0, 1], render(rep)
    assert "livelock" in rep.outcome.detail and "shape 0 repeat 0 whole" in rep.outcome.detail
    assert elapsed < 3.0 + 5


def test_a_rank_dependent_failure_with_layer_1_passing_is_placed_in_the_fused_path_not_the_communication():
    def s(name, status, **kw):
        return LayerSummary(name, status, runs=2, failed_runs=2 if status == "FAIL" else 0, **kw)
    whole = s("whole", "FAIL", ranks_per_failed_run=[[1], [1]], failing_ranks=[1], codes={"fail": 2},
              reproducible_runs=[[0, 0], [0, 1]])
    quiet = diagnose(Facts(s("comm", "PASS"), s("compute", "PASS"), whole, {"status": "PASS"}, "ok", [], "", 2))
    assert quiet.findings[0].layer == "layer 3 (whole)" and "fused path" in quiet.cause, quiet
    assert "same bits when replayed" in quiet.findings[0].evidence
    comm = s("comm", "FAIL", classes={"misrouted": 4}, codes={"fail": 2})
    loud = diagnose(Facts(comm, s("compute", "PASS"), whole, {"status": "PASS"}, "ok", [], "", 2))
    assert loud.findings[0].layer == "communication", loud
