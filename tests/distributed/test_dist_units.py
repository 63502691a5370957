"""Unit tests of `fusecheck dist` parts that need no ranks: tags, collectives, stats, diagnosis, stress, backends."""
from __future__ import annotations

import math
import time

import pytest
import torch
import torch.distributed as dist

from fusecheck.distributed import stress
from fusecheck.distributed.backends import BackendUnavailable, select_backend
from fusecheck.distributed.collectives import COLLECTIVES
from fusecheck.distributed.diagnosis import Facts, diagnose
from fusecheck.distributed.stats import wilson_interval
from fusecheck.distributed.summary import LayerSummary
from fusecheck.distributed.ranges import EXACT_INT_LIMIT
from fusecheck.distributed.tags import MOVE, SUM, explain


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("world", [2, 4])
def test_tags_decode_to_their_source_in_the_op_dtype(dtype, world):
    numel = 70_000                          # more than fp16/bf16 hold as integers: several sub-runs
    move = MOVE.plan(dtype, world, numel)
    assert all(t.dtype is dtype for t in move.encode(0, (numel,)))
    for rank in (0, world - 1):
        origins = move.decode([t[-40:] for t in move.encode(rank, (numel,))])
        assert [(o.kind, o.src, o.offset) for o in origins] == [("tag", (rank,), i) for i in range(numel - 40, numel)]
    summ = SUM.plan(dtype, world, numel)
    subs = [COLLECTIVES["all_reduce"].deliver([summ.encode(r, (numel,))[j] for r in range(world)], 0)
            for j in range(summ.subruns)]
    origins = summ.decode([t[-40:] for t in subs])
    assert [(o.kind, o.src, o.offset) for o in origins] == [("tag", tuple(range(world)), i)
                                                           for i in range(numel - 40, numel)]


def test_tag_sub_runs_grow_only_when_the_dtype_cannot_hold_the_position():
    assert MOVE.plan(torch.bfloat16, 2, 64).subruns == 1
    assert MOVE.plan(torch.bfloat16, 4, 100_000).subruns == 2       # base 34560 bit patterns per sub-run
    assert MOVE.plan(torch.float32, 8, 10**8).subruns == 1
    assert SUM.plan(torch.bfloat16, 4, 100).subruns == 1 + 2        # ranks; offsets as 32 + a digit in base 32
    assert "bit patterns of bfloat16" in MOVE.plan(torch.bfloat16, 2, 8).description


NARROWER = [torch.bfloat16, torch.float16] + [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2")
                                               if hasattr(torch, n)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("scheme, collective", [(MOVE, "all_gather"), (SUM, "all_reduce"), (SUM, "reduce_scatter")])
@pytest.mark.parametrize("world", [2, 3, 8])
def test_a_transfer_through_a_narrower_dtype_changes_the_tags(dtype, scheme, collective, world):
    """Layer 1 must catch communication that rounds through a dtype with fewer significand bits (fp32 data sent
    as bf16): the tags use every significand bit they can, so small integers that survive the rounding
    cannot hide it. A sum of W exact integers leaves each rank p - ceil(log2 W) bits (fp16 over 8 ranks: 8,
    as many as bf16 holds): there the narrower dtype is not narrower for the tags, and layer 3 judges it."""
    numel = 4 * world * 6
    plan = scheme.plan(dtype, world, numel)
    tags = [plan.encode(r, (numel,)) for r in range(world)]
    deliver = COLLECTIVES[collective].deliver
    for narrow in NARROWER:
        bits = round(1 - math.log2(torch.finfo(narrow).eps))           # significand bits, the implicit one too
        room = (EXACT_INT_LIMIT[dtype] // world).bit_length() - 1 if scheme is SUM else 64
        if torch.finfo(narrow).eps <= torch.finfo(dtype).eps or bits >= room:
            continue
        for j in range(plan.subruns):
            exact = deliver([t[j] for t in tags], 0)
            rounded = deliver([t[j].to(narrow).to(dtype) for t in tags], 0)
            if not torch.equal(rounded, exact):
                break
        else:
            raise AssertionError(f"{dtype} tags of {collective} survive a transfer in {narrow}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter"])
@pytest.mark.parametrize("lossy", ["clamp_negative", "grid_1_64"])
def test_a_reduction_path_that_clamps_negatives_or_snaps_to_a_grid_changes_the_tags(dtype, collective, lossy):
    """Tags that are non-negative integers pass a path that clamps negatives or snaps values to a 1/64 grid:
    layer 1 passed and the diagnosis blamed the fused path. Signed, dyadic tags in [1/2, 1) do not."""
    world, numel = 3, 3 * 20
    plan = SUM.plan(dtype, world, numel)
    transform = {"clamp_negative": lambda t: t.clamp(min=0),
                 "grid_1_64": lambda t: torch.round(t * 64) / 64}[lossy]
    tags = [plan.encode(r, (numel,)) for r in range(world)]
    deliver = COLLECTIVES[collective].deliver
    changed = [not torch.equal(deliver([transform(t[j]) for t in tags], 0), deliver([t[j] for t in tags], 0))
               for j in range(plan.subruns)]
    assert any(changed), f"{dtype} {collective}: {lossy} left every sub-run unchanged"
    exact = [deliver([t[j] for t in tags], 0) for j in range(plan.subruns)]
    assert all(o.kind == "tag" for o in plan.decode(exact))      # and the exact sums still decode


def _gather(world, shape, swap=None):
    plan = MOVE.plan(torch.float32, world, int(torch.Size(shape).numel()))
    tags = [plan.encode(r, shape)[0] for r in range(world)]
    expected = COLLECTIVES["all_gather"].deliver(tags, 0)
    if swap:
        tags[swap[0]], tags[swap[1]] = tags[swap[1]], tags[swap[0]]
    return torch.cat(tags), expected, plan


def test_explain_names_wrong_rank_shift_unwritten_and_garbage():
    got, expected, plan = _gather(3, (4, 2), swap=(0, 2))
    lines, classes = explain([got], [expected], plan, 2, 2, rank=1)
    assert classes == {"misrouted": 16}
    assert any("hold rank 2's block 0 (row 0) where rank 0's block 0 (row 0) belongs" in l for l in lines)

    got, expected, plan = (t.reshape(-1) if isinstance(t, torch.Tensor) else t for t in _gather(2, (4, 2)))
    got[2:6] = expected[4:8].clone()       # rank 0's rows 1, 2 hold its rows 2, 3
    got[6:8] = float("nan")                # row 3 never written
    got[8] = 12345.5                       # stale workspace value where rank 1's row 0 belongs
    lines, classes = explain([got], [expected], plan, 2, 2, rank=0)
    assert classes == {"shifted": 4, "unwritten": 2, "garbage": 1}
    assert any("shifted by +1 row" in l for l in lines)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_explain_names_a_missing_reduction_contribution(dtype):
    world, shape = 3, (2, 2)
    plan = SUM.plan(dtype, world, 4)
    tags = [plan.encode(r, shape) for r in range(world)]
    expected = [COLLECTIVES["all_reduce"].deliver([t[j] for t in tags], 0) for j in range(plan.subruns)]
    got = [tags[0][j] + tags[2][j] for j in range(plan.subruns)]      # rank 1's contribution lost
    lines, classes = explain(got, expected, plan, 2, 1, rank=0)
    assert classes == {"missing_ranks": 4} and "missing rank(s) 1" in lines[0]


def test_collective_invariants():
    xs = [torch.arange(8.0).reshape(4, 2) + 100 * r for r in range(2)]
    c = COLLECTIVES
    assert torch.equal(c["all_gather"].deliver(xs, 1), torch.cat(xs))
    assert torch.equal(c["all_reduce"].deliver(xs, 0), xs[0] + xs[1])
    assert torch.equal(c["reduce_scatter"].deliver(xs, 1), (xs[0] + xs[1])[2:])
    assert torch.equal(c["all_to_all_single"].deliver(xs, 1), torch.cat([xs[0][2:], xs[1][2:]]))
    assert c["reduce_scatter"].precondition([torch.zeros(3, 2)] * 2, 2) is not None
    assert c["all_gather"].precondition([torch.zeros(3, 2), torch.zeros(2, 2)], 2) is not None


def test_wilson_interval_known_values():
    lo, hi = wilson_interval(0, 10)
    assert lo == 0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))


def _facts(comm="PASS", compute="PASS", whole="PASS", whole_ranks=(), world=4, outcome="ok", whole_codes=None,
           **kw):
    def s(name, status, **extra):
        x = LayerSummary(name, status, runs=4, failed_runs=4 if status == "FAIL" else 0, **extra)
        return x
    w = s("whole", whole, ranks_per_failed_run=[list(whole_ranks)] * (4 if whole == "FAIL" else 0),
          failing_ranks=list(whole_ranks), codes=whole_codes or ({"fail": 4} if whole == "FAIL" else {}))
    return Facts(s("comm", comm, **kw), s("compute", compute), w, {"status": "PASS"}, outcome, [], "", world)


@pytest.mark.parametrize("facts, cause", [
    (_facts(), "none"),
    (_facts(comm="FAIL", whole="FAIL", whole_ranks=(0, 1, 2, 3)), "communication"),
    (_facts(compute="FAIL", whole="FAIL", whole_ranks=(0, 1, 2, 3)), "compute"),
    (_facts(whole="FAIL", whole_ranks=(1, 2)), "layout / rank order"),
    (_facts(comm="FAIL", whole="FAIL", whole_ranks=(0, 1, 2, 3), nondeterministic_shapes=[0]), "synchronization"),
    # the same wrong positions every repeat at full speed, others when every rank pauses after each call
    (_facts(comm="FAIL", whole="FAIL", whole_ranks=(0, 1, 2, 3), timing_shapes=[1]), "synchronization"),
    (_facts(whole="FAIL", whole_ranks=(0, 1, 2, 3)), "interaction"),
    (_facts(whole="FAIL", whole_ranks=(0, 1, 2, 3), whole_codes={"dtype_mismatch": 4}), "output contract"),
    (_facts(whole="FAIL", whole_ranks=(0, 1, 2, 3), whole_codes={"type_mismatch": 4}), "output contract"),
    (_facts(whole="FAIL", whole_ranks=(1,), whole_codes={"device_mismatch": 1}), "output contract"),
    (_facts(whole="FAIL", whole_ranks=(0, 1, 2, 3), whole_codes={"golden_shape_mismatch": 4}), "golden contract"),
    (_facts(comm="FAIL", whole="FAIL", whole_ranks=(0, 1), whole_codes={"shape_mismatch": 4}), "output contract"),
])
def test_diagnosis_rules(facts, cause):
    assert diagnose(facts).cause.startswith(cause)


def test_output_contract_failures_are_not_also_called_interaction_or_layout():
    for ranks in ((0, 1, 2, 3), (1,)):
        d = diagnose(_facts(whole="FAIL", whole_ranks=ranks, whole_codes={"shape_mismatch": 4}))
        assert [f.cause for f in d.findings] == ["output contract: fused() returns the wrong shape"]


def test_stress_wraps_and_restores_dist_calls(monkeypatch):
    calls, slept = [], []

    class Work:
        def wait(self):
            calls.append("wait")

    monkeypatch.setattr(dist, "all_reduce", lambda *a, **k: calls.append("call") or Work())
    monkeypatch.setattr(stress.time, "sleep", slept.append)
    original = dist.all_reduce
    cfg = stress.StressConfig(max_delay_ms=30, seed=1, straggler=0)
    with stress.injected_delays(cfg, rank=0):
        assert dist.all_reduce is not original
        for _ in range(40):
            dist.all_reduce(torch.zeros(1), async_op=True).wait()
    assert dist.all_reduce is original and calls == ["call", "wait"] * 40
    # per call: no delay, before the call, after the wait, or both; magnitudes spread over decades up to 30 ms
    assert 20 <= len(slept) < 80 and max(slept) <= 0.030 and min(slept) < 0.003
    before = len(slept)
    with stress.injected_delays(stress.StressConfig(max_delay_ms=30, seed=1, straggler=1), rank=0):
        for _ in range(10):
            dist.all_reduce(torch.zeros(1), async_op=True).wait()
    assert len(slept) == before          # only the straggler's calls are delayed


def test_stress_stragglers_cover_every_rank():
    picks = {stress.StressConfig.for_run(i, 20, 0, 4).straggler for i in range(60)}
    assert picks == {0, 1, 2, 3}


def test_backend_selection_on_this_machine():
    assert select_backend("auto", 2).name in ("gloo", "nccl", "hccl")
    if not torch.cuda.is_available():
        with pytest.raises(BackendUnavailable, match="CUDA"):
            select_backend("nccl", 2)
    try:
        import torch_npu  # noqa: F401
    except Exception:
        with pytest.raises(BackendUnavailable, match="torch_npu"):
            select_backend("hccl", 2)
    with pytest.raises(BackendUnavailable, match="unknown backend"):
        select_backend("mpi-over-carrier-pigeon", 2)


@pytest.mark.parametrize("shape", [(5, 3), (3,), (2, 5), (4, 2), (3, 1), (8, 16), (2, 3, 4)])
def test_planted_specials_leave_a_finite_row_and_column(shape):
    from fusecheck.distributed.layers import plant_specials
    t = plant_specials(torch.zeros(shape), torch.Generator().manual_seed(3))
    rows = t.reshape(t.shape[0], -1) if t.dim() > 1 else t.reshape(1, -1)
    bad = ~torch.isfinite(rows)
    assert bool(torch.isnan(rows).any())                         # NaN always planted
    assert not bool(bad.any(0).all()) or rows.shape[1] == 1      # some column stays finite
    assert not bool(bad.any(1).all()) or rows.shape[0] == 1      # some row stays finite
    if min(max(1, rows.shape[0] - 1) * max(1, rows.shape[1] - 1), 3) == 3:
        assert {float(v) for v in rows[bad]} >= {float("inf"), float("-inf")}


def test_planted_specials_in_a_three_column_gemm_operand_keep_finite_outputs():
    """AllGatherGemm's default shape m=2, k=5, n=3: specials in all 3 columns of one row of b made every output
    NaN/Inf, leaving layer 2 nothing finite to judge."""
    from fusecheck.distributed.layers import plant_specials
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    for seed in range(20):
        out = a @ plant_specials(b, torch.Generator().manual_seed(seed))
        assert bool(torch.isfinite(out).any()) and not bool(torch.isfinite(out).all())


def test_a_spec_named_twice_is_checked_once():
    from fusecheck.distributed.spec import expand_targets
    ref = "kernels/ag_gemm.py:AllGatherGemm"
    assert expand_targets([ref, "kernels/ag_gemm.py", ref]) == [(ref, True)]


def test_the_settle_replay_pauses_every_rank_after_each_call(monkeypatch):
    """stress.StressConfig.settle_ms: every rank (no straggler) sleeps after each dist call returns."""
    slept = []
    monkeypatch.setattr(stress.time, "sleep", slept.append)
    monkeypatch.setattr(dist, "all_reduce", lambda *a, **k: None)
    cfg = stress.StressConfig(max_delay_ms=0.0, settle_ms=20.0)
    for rank in (0, 1):
        with stress.injected_delays(cfg, rank):
            dist.all_reduce(None)
            dist.all_reduce(None)
    assert slept == [0.02] * 4
