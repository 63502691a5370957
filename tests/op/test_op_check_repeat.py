"""Repeats in `check`: the fused op's race caught through a user backend, with a rate; the naive backend of a
fused-op author (`lambda *a: (fused(*a),)`, issue 20 item 4) sees the model's own graph and passes."""
from __future__ import annotations

from fusecheck.case import load_target
from fusecheck.op.repeated import CALLS_PER_CHECK, repeat_check

CASE = "tests/planted/op_race.py:case"


def _check(backend: str):
    from fusecheck.check import run_check
    return lambda seed: run_check(load_target(CASE, seed=seed), backend=backend, seed=seed)


def test_the_naive_fused_op_backend_passes_the_check(capsys):
    from fusecheck.cli.main import main
    assert main(["check", CASE, "--backend", "tests/planted/op_race.py:naive_backend", "-q"]) == 0
    assert "verdict: PASS (exit 0)" in capsys.readouterr().out


def test_check_repeats_catch_the_race_through_a_backend_with_a_rate():
    # a 30%-per-call race, two judged calls per check: 10 checks all miss it with probability 0.49^10 < 1e-3
    report = repeat_check(_check("tests/planted/op_race.py:backend_30"), repeat=10)
    data = report.to_dict()
    assert report.exit_code == 1 and data["status"] == "FAIL"
    rep = data["repeats"]
    assert rep["runs"] == 10 and 0 < rep["failures"] <= 10 and rep["calls_per_run"] == CALLS_PER_CHECK
    assert rep["statuses"].count("FAIL") == rep["failures"]
    assert rep["overall"]["ci95_low"] < rep["failures"] / 10 < rep["overall"]["ci95_high"]
    assert any("runs failed" in n and "Wilson 95%" in n for n in report.notes)
    assert any(n.startswith("unit: 1 run = 2 calls of the compiled model") for n in report.notes)


def test_a_clean_repeated_check_states_its_bound_and_what_it_cannot_exclude():
    report = repeat_check(_check("tests/planted/op_race.py:naive_backend"), repeat=2)
    assert report.exit_code == 0 and report.to_dict()["repeats"]["failures"] == 0
    assert any("cannot exclude a 5% failure rate" in n for n in report.notes)
