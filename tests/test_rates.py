"""The rate math shared by op, check and dist: Wilson bounds, the runs a bound needs, per-call rates."""
import pytest

from fusecheck.rates import Rate, per_call, runs_for_bound, verdict_line, wilson_interval


def test_73_clean_runs_bound_a_rate_below_5_percent_and_72_do_not():
    assert runs_for_bound(0.05) == 73
    assert wilson_interval(0, 73)[1] < 0.05 <= wilson_interval(0, 72)[1]


@pytest.mark.parametrize("rate", [0.5, 0.1, 0.05, 0.01, 0.001])
def test_runs_for_bound_is_the_fewest_clean_runs(rate):
    n = runs_for_bound(rate)
    assert Rate(0, n).excludes(rate) and not Rate(0, n - 1).excludes(rate)


def test_wilson_matches_its_closed_form_and_brackets_the_rate():
    assert wilson_interval(0, 50)[1] == pytest.approx(3.8415 / (50 + 3.8415), rel=1e-4)
    lo, hi = wilson_interval(5, 100)
    assert lo < 0.05 < hi and lo == pytest.approx(0.0215, abs=1e-3) and hi == pytest.approx(0.1118, abs=1e-3)
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(0, 0) == (0.0, 1.0)


def test_per_call_backs_out_the_probability_of_one_call():
    p = 0.05
    run_rate = 1 - (1 - p) ** 2      # two calls per run
    assert per_call(run_rate, 2) == pytest.approx(p)
    assert per_call(0.3, 1) == 0.3


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 2.0])
def test_a_bound_outside_0_1_is_refused(bad):
    with pytest.raises(ValueError):
        runs_for_bound(bad)


def test_a_short_clean_pass_says_it_cannot_exclude_the_requested_rate():
    short = verdict_line(Rate(0, 10), 0.05, passed=True)
    assert "cannot exclude a 5% failure rate" in short and "--rate-bound 0.05 runs 73" in short
    long = verdict_line(Rate(0, 73), 0.05, passed=True)
    assert "excludes a 5% failure rate" in long and "cannot" not in long
    failed = verdict_line(Rate(7, 100), 0.05, passed=False)
    assert "7/100 runs failed: 7.0%" in failed and "Wilson 95%" in failed


def test_to_dict_states_the_unit():
    d = Rate(3, 100, calls=2).to_dict()
    assert d["calls_per_run"] == 2 and d["ranks"] == 1 and d["rate"] == 0.03
    assert d["ci95_low"] < 0.03 < d["ci95_high"] and d["per_call_ci95_high"] < d["ci95_high"]
