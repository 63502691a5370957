"""Issue 20 part 3: failure rates per shape with their unit, a never-written slot is layout (not a race),
a layer that fails alone gets the blame alone (planted bugs: tests/planted/dist_bugs.py)."""
from __future__ import annotations

import pytest

from fusecheck.distributed.diagnosis import Facts, diagnose
from fusecheck.distributed.report import render
from fusecheck.distributed.runner import check
from fusecheck.distributed.summary import LayerSummary
from fusecheck.distributed.task import CheckTask

PLANTED = "tests/planted/dist_bugs.py"


def run(cls, world=2, **kw):
    return check(CheckTask(f"{PLANTED}:{cls}", **kw), world)


@pytest.mark.parametrize("world, dtype", [(2, "float32"), (4, "bfloat16")])
def test_deterministic_tail_only_bug_reads_100_percent_on_its_shape_and_0_on_the_others(world, dtype):
    rep = run("TailOnlyBug", world, repeat=3, layers=("whole",), dtype=dtype)
    whole = rep.layers["whole"]
    assert whole.status == "FAIL", render(rep)
    rates = whole.shape_rates()
    assert [(r.failures, r.runs) for r in rates.values()] == [(0, 3), (3, 3), (0, 3)], render(rep)
    assert whole.intermittent_shapes == []
    text = " ".join(render(rep).split())
    assert "shape 1 3/3 (100.0%" in text and "shape 0 0/3 (0%" in text and "overall 3/9 (33.3%" in text, text
    assert f"unit: 1 run = 1 call of fused() on each of {world} rank(s)" in text
    d = rep.to_dict()
    per = d["layers"]["whole"]["per_shape_rates"]
    assert per["1"]["rate"] == 1.0 and per["0"]["rate"] == 0.0 and per["1"]["ci95_low"] > 0.29
    assert per["1"]["ranks"] == world and per["1"]["calls_per_run"] == 1
    assert d["repeat_stats"]["whole"]["per_shape"]["2"]["failures"] == 0
    assert "unit" in d["layers"]["whole"]["failure_rate"] and "unit" in d["repeat_stats"]["comm"]
    assert not rep.diagnosis.cause.startswith("synchronization")
    assert "fails on shape(s) [1] in every run and never on shape(s) [0, 2]" in rep.diagnosis.findings[0].evidence


def test_correct_kernel_on_the_same_shapes_is_0_percent_everywhere():
    rep = run("CorrectOnRaggedShapes", 2, repeat=3, layers=("comm", "whole"))
    assert rep.status == "PASS", render(rep)
    for name in ("comm", "whole"):
        assert all(r.failures == 0 and r.runs == 3 for r in rep.layers[name].shape_rates().values())
    comm = rep.to_dict()["layers"]["comm"]
    assert comm["calls_per_run"] >= 1 and comm["failure_rate"]["ranks"] == 2


@pytest.mark.parametrize("world, dtype", [(2, "float32"), (4, "bfloat16"), (4, "float16")])
def test_never_written_slot_with_changing_garbage_is_layout_not_a_race(world, dtype):
    rep = run("OffByOneVaryingPoison", world, repeat=3, dtype=dtype)
    comm = rep.layers["comm"]
    assert comm.status == "FAIL" and comm.failed_runs == comm.runs, render(rep)
    assert comm.values_vary_shapes, "the plant must leave different garbage in every repeat"
    assert comm.nondeterministic_shapes == []     # the same positions are wrong in every repeat
    assert rep.diagnosis.cause.startswith("communication"), render(rep)
    assert not any("synchronization" in f.cause for f in rep.diagnosis.findings), render(rep)
    assert "deterministic" in rep.diagnosis.findings[0].evidence


def _summary(name, outcomes, **kw):
    failed = [o for o in outcomes if o[3]]
    return LayerSummary(name, "FAIL" if failed else "PASS", runs=len(outcomes), failed_runs=len(failed),
                        run_outcomes=[list(o) for o in outcomes], **kw)


def _facts(comm, compute, whole):
    return Facts(comm, compute, whole, {"status": "PASS"}, "ok", [], "", 2)


def test_comm_failing_alone_on_ordinary_inputs_is_communication_even_when_a_probe_fails():
    """Layer 1 fails every run; layer 2 fails only on a magnitude probe: the cause is communication (layer 2's
    probe failure is its own finding), whatever the dtype."""
    comm = _summary("comm", [(0, r, "", True) for r in range(3)], classes={"misrouted": 6})
    compute = _summary("compute", [(0, 0, "", False), (0, 0, "magnitude:huge:a", True), (0, 1, "", False)],
                       variants_failed=["magnitude:huge:a"])
    whole = _summary("whole", [(0, r, "", True) for r in range(3)], ranks_per_failed_run=[[0, 1]] * 3,
                     failing_ranks=[0, 1])
    d = diagnose(_facts(comm, compute, whole))
    assert d.cause.startswith("communication (") and "compute" not in d.cause, d
    assert any(f.cause.startswith("compute (magnitude") for f in d.findings)
    # both layers failing on ordinary inputs is still both
    compute2 = _summary("compute", [(0, 0, "", True), (0, 1, "", True)])
    assert diagnose(_facts(comm, compute2, whole)).cause == "communication and compute"


@pytest.mark.parametrize("dtype, comm_status", [("bfloat16", "FAIL"), ("float32", "PASS")])
def test_bf16_only_communication_bug_is_communication(dtype, comm_status):
    rep = run("Bf16OnlyRankOrder", 2, repeat=2, dtype=dtype, shapes=[{"m": 4, "k": 6, "n": 4}])
    assert rep.layers["comm"].status == comm_status, render(rep)
    if comm_status == "FAIL":
        assert rep.diagnosis.cause.startswith("communication (rank order"), render(rep)
        assert "compute" not in rep.diagnosis.cause
    else:
        assert rep.status == "PASS", render(rep)


def test_rank_dependent_whole_failure_with_a_probe_only_compute_failure_is_layout():
    comm = _summary("comm", [(0, r, "", False) for r in range(3)])
    compute = _summary("compute", [(0, 0, "", False), (0, 0, "nan_inf:b", True)], variants_failed=["nan_inf:b"])
    whole = _summary("whole", [(0, r, "", True) for r in range(3)], ranks_per_failed_run=[[1]] * 3,
                     failing_ranks=[1])
    d = diagnose(_facts(comm, compute, whole))
    assert d.cause.startswith("layout / rank order"), d
    assert any(f.cause.startswith("compute (NaN/Inf") for f in d.findings)


def test_a_short_pass_says_it_cannot_exclude_a_5_percent_rate():
    rep = run("CorrectOnRaggedShapes", 2, repeat=3, layers=("whole",), shapes=[{"m": 6, "k": 6, "n": 4}])
    assert rep.status == "PASS", render(rep)
    assert any("cannot exclude a 5% failure rate" in c and "--repeat 73" in c for c in rep.caveats), rep.caveats
    assert "cannot exclude a 5% failure rate" in " ".join(render(rep).split())


def test_a_spec_opts_an_input_out_of_the_nan_inf_probes():
    rep = run("NaNOptOutB", 2, repeat=1)
    assert rep.status == "PASS", render(rep)
    variants = {v for _, _, v, _ in rep.layers["compute"].run_outcomes}
    assert "nan_inf:a" in variants and "nan_inf:delivered" in variants and "nan_inf:b" not in variants
    assert any(v.startswith("magnitude:") and "b" in v.split(":")[2].split("+") for v in variants)


def test_an_unknown_opt_out_name_is_a_spec_error_exit_2(tmp_path, capsys):
    from fusecheck.distributed.spec import SpecError
    with pytest.raises(SpecError, match=r"no_nan_inf names \['nope'\]"):
        run("NaNOptOutUnknown", 2, repeat=1)
    from fusecheck.distributed.entry import main
    assert main([f"{PLANTED}:NaNOptOutUnknown", "--world-size", "2"]) == 2
    assert "no_nan_inf names ['nope']" in capsys.readouterr().err


def test_comm_failing_every_run_leads_over_a_compute_failing_a_few():
    comm = _summary("comm", [(0, r, "", True) for r in range(10)], classes={"missing_ranks": 10})
    compute = _summary("compute", [(0, r, "", r == 3) for r in range(10)])
    whole = _summary("whole", [(0, r, "", True) for r in range(10)], ranks_per_failed_run=[[0, 1]] * 10,
                     failing_ranks=[0, 1])
    d = diagnose(_facts(comm, compute, whole))
    assert d.cause.startswith("communication ("), d
    assert any(f.cause == "compute" and "1 of 10 ordinary runs" in f.evidence for f in d.findings), d
    # compute failing as often as comm: both
    compute_all = _summary("compute", [(0, r, "", True) for r in range(10)])
    assert diagnose(_facts(comm, compute_all, whole)).cause == "communication and compute"


def test_tail_only_compute_bug_is_compute_on_its_shape_only():
    rep = run("TailOnlyComputeBug", 2, repeat=3)
    assert rep.diagnosis.cause == "compute", render(rep)
    rates = rep.layers["compute"].shape_rates()
    assert rates[1].failures == rates[1].runs and rates[0].failures == 0 and rates[2].failures == 0, render(rep)
    assert "fails on shape(s) [1] in every run and never on shape(s) [0, 2]" in rep.diagnosis.findings[0].evidence
