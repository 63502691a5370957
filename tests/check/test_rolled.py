"""The rolled call's rule (fusecheck/check/rolled.py) on drawn data: it fails a call worse than eager whatever
the golden, and stays quiet on a correct compile's distance to eager and on a few near-tie flips."""
import math

import pytest
import torch

from fusecheck.check.rolled import (RolledDoubt, RolledScreen, beyond, distance, eager_noise, judge_rolled,
                                    rolled_doubt, settle_rolled)
from fusecheck.compare import compare
from fusecheck.policy import Policy

POLICY = Policy()


def _noisy(g: torch.Tensor, sigma: float, gen: torch.Generator) -> torch.Tensor:
    return (g.double() + sigma * torch.randn(g.shape, generator=gen, dtype=torch.float64)).float()


def _first_row(seed: int, n: int, sigma: float, compiled_sigma: float):
    """The first call judged: eager and compiled each off the golden by their own noise."""
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(n, generator=gen, dtype=torch.float64)
    c1, e1 = _noisy(g, compiled_sigma, gen), _noisy(g, sigma, gen)
    return (compare(c1, e1, g, policy=POLICY, name="output"), c1, e1), gen


def rolled_call_verdict(row, stats, c1, e1, policy):
    """The rule as check/rows.py applies it: the doubt, then its verdict (None: quiet)."""
    doubt = rolled_doubt(row, stats, c1, e1, policy)
    return judge_rolled(doubt, policy) if doubt is not None else None


def _verdict(first, c3, e3):
    row, c1, e1 = first
    return rolled_call_verdict(row, _stats(c3, e3), c1, e1, POLICY)


def _stats(c3: torch.Tensor, e3: torch.Tensor):
    screen = RolledScreen({"output": e3})
    screen.add("output", c3)
    return screen.stats["output"]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [16, 1000, 100_000])
def test_a_correct_compile_on_rolled_inputs_stays_quiet(seed, n):
    """Compiled at up to the RMSE limit (2x eager's noise), on other data of the same kind: no verdict."""
    sigma = 1e-4
    c_sigma = sigma * (1 + seed % 3 * 0.4)
    first, gen = _first_row(seed, n, sigma, c_sigma)
    assert first[0].passed, first[0].verdict.message
    g3 = torch.randn(n, generator=gen, dtype=torch.float64)
    c3, e3 = _noisy(g3, c_sigma, gen), _noisy(g3, sigma, gen)
    flips = torch.randperm(n, generator=gen)[:3]  # near-tie flips: a few elements O(1) apart
    c3[flips] += 1.0
    assert _verdict(first, c3, e3) is None


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n", [128, 100_000])
def test_a_rolled_call_worse_than_eager_fails(seed, n):
    """20% off on every fourth element, and 4x eager's noise everywhere (8x below the policy's small-tensor
    size, whose RMSE ratio is 3): both fail."""
    sigma = 1e-4
    first, gen = _first_row(seed, n, sigma, sigma)
    g3 = torch.randn(n, generator=gen, dtype=torch.float64)
    e3 = _noisy(g3, sigma, gen)
    hit = torch.arange(n) % 4 == 0
    for c3 in (torch.where(hit, e3 * 1.2, e3), _noisy(g3, (4 if n >= 1000 else 8) * sigma, gen)):
        v = _verdict(first, c3, e3)
        assert v is not None and v.code == "rolled_call_worse" and not v.passed


def test_a_row_that_fails_already_or_has_no_golden_keeps_its_verdict():
    (row, c1, e1), gen = _first_row(0, 1000, 1e-4, 1e-4)
    e3 = torch.randn(1000, generator=gen)
    stats = _stats(e3 * 2, e3)
    assert rolled_call_verdict(row, stats, c1, e1, POLICY) is not None
    no_golden = compare(c1, e1, policy=POLICY, name="output")
    assert no_golden.reference_vs_golden is None and rolled_call_verdict(no_golden, stats, c1, e1, POLICY) is None
    failing = compare(c1 * 3, e1, e1.double(), policy=POLICY, name="output")
    assert not failing.passed and rolled_call_verdict(failing, stats, c1, e1, POLICY) is None


def test_the_distance_counts_every_element_once_by_its_power_of_two():
    c = torch.tensor([1.0, 1.0, float("nan"), float("inf"), 0.0, 5.0])
    e = torch.tensor([1.0, 1.5, float("nan"), float("inf"), float("nan"), 1.0])
    d = distance(c, e)
    assert int(d.hist.sum()) == 6 and int(d.hist[0]) == 3  # equal, both NaN, both +Inf
    assert beyond(d.hist, 0.5) == 3 and beyond(d.hist, 0.6) == 2 and beyond(d.hist, 1e300) == 1  # NaN vs 0 last
    assert d.rmse == pytest.approx(((0.25 + 16) / 5) ** 0.5)


def test_the_screen_skips_what_it_cannot_compare_and_drops_partial_gradients():
    screen = RolledScreen({"a": torch.ones(3), "b": torch.ones(3), "i": torch.ones(3, dtype=torch.int64)})
    screen.add("a", torch.ones(4))                       # another shape (data-dependent)
    screen.add("i", torch.ones(3, dtype=torch.int64))    # not floating: no golden-free rule for it
    screen.add("missing", torch.ones(3))
    screen.add("b", torch.ones(3) * 2)
    assert set(screen.stats) == {"b"} and screen.stats["b"].rmse == 1.0
    screen.drop(["b"])
    assert screen.stats == {}


@pytest.mark.parametrize("seed", range(4))
def test_larger_values_on_the_rolled_inputs_scale_the_bound_and_a_bug_there_still_fails(seed):
    """Rounding errors are relative: where eager's result on the rolled inputs is 3x larger, a correct
    compile's distance to eager is 3x larger too and stays quiet (the first inputs' bound alone failed it);
    20% off on every fourth element of that larger result still fails."""
    sigma, n, k = 1e-4, 100_000, 3.0
    first, gen = _first_row(seed, n, sigma, 1.8 * sigma)
    g3 = k * torch.randn(n, generator=gen, dtype=torch.float64)
    c3, e3 = _noisy(g3, 1.8 * k * sigma, gen), _noisy(g3, k * sigma, gen)
    assert _verdict(first, c3, e3) is None
    bad = torch.where(torch.arange(n) % 4 == 0, e3 * 1.2, e3)
    v = _verdict(first, bad, e3)
    assert v is not None and v.code == "rolled_call_worse" and "larger there" in v.message


@pytest.mark.parametrize("c", [math.sqrt(2), math.sqrt(3)])
def test_eager_noise_is_the_largest_error_its_randomised_runs_allow(c):
    """Each run differs from eager by c x eager's error (c in [sqrt 2, sqrt 3]): read back at c = sqrt 2, at
    most sqrt 1.5 above it at sqrt 3 (an over-estimate widens the bound: never a false FAIL from it)."""
    gen = torch.Generator().manual_seed(3)
    sigma = 1e-3
    diffs = [c * sigma * torch.randn(20_000, generator=gen) for _ in range(4)]
    assert sigma * c / math.sqrt(2) * 0.97 < eager_noise(diffs) < sigma * c / math.sqrt(2) * 1.03
    assert eager_noise([]) == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_a_fail_on_the_estimate_is_cleared_by_eager_noise_measured_there_and_a_bug_is_not(seed):
    """Eager 10x noisier on the rolled inputs at the same scale (heavier cancellation there), compiled as noisy
    as eager: the first inputs' estimate fails it; eager's noise measured on the rolled inputs clears it.
    20% off on every fourth element of the same call still fails with the measured noise."""
    sigma, n = 1e-4, 10_000
    first, gen = _first_row(seed, n, sigma, sigma)
    g3 = torch.randn(n, generator=gen, dtype=torch.float64)
    c3, e3 = _noisy(g3, 10 * sigma, gen), _noisy(g3, 10 * sigma, gen)
    assert _verdict(first, c3, e3) is not None  # the estimate alone: a false FAIL
    row, c1, e1 = first
    runs = [(_noisy(g3, 10 * sigma, gen) - e3) for _ in range(4)]  # eager-like runs' differences from eager
    doubt = RolledDoubt(row.verdict, _stats(c3, e3), distance(c1, e1), row.vs_reference.rmse,
                        row.reference_vs_golden.rmse)
    assert judge_rolled(doubt, POLICY, eager_noise(runs)) is None
    bad = torch.where(torch.arange(n) % 4 == 0, e3 * 1.2, e3)
    bad_doubt = RolledDoubt(row.verdict, _stats(bad, e3), doubt.before, doubt.first_rmse, doubt.eager_rmse)
    v = judge_rolled(bad_doubt, POLICY, eager_noise(runs))
    assert v is not None and v.code == "rolled_call_worse" and "randomised-rounding runs measure" in v.message


def test_settling_restores_the_verdict_before_or_keeps_the_fail_and_says_so():
    (row, c1, e1), gen = _first_row(0, 1000, 1e-4, 1e-4)
    passed = row.verdict
    e3 = torch.randn(1000, generator=gen)
    doubt = RolledDoubt(passed, _stats(e3 + 1e-3 * torch.randn(1000, generator=gen), e3), distance(c1, e1),
                        row.vs_reference.rmse, row.reference_vs_golden.rmse)
    row.verdict = judge_rolled(doubt, POLICY)
    assert row.verdict is not None and not row.verdict.passed
    quiet = {"output": doubt}
    notes = settle_rolled(quiet, {"output": row}, POLICY, lambda names: _spread_of(names, 1e-3, gen))
    assert row.verdict is passed and quiet == {} and "1 within eager's own noise there" in notes[0]
    row.verdict = judge_rolled(doubt, POLICY)
    notes = settle_rolled({"output": doubt}, {"output": row}, POLICY, lambda names: _spread_of(names, 1e-6, gen))
    assert row.verdict.code == "rolled_call_worse" and "1 still worse" in notes[0]
    row.verdict = judge_rolled(doubt, POLICY)  # nothing measured for the row: the FAIL stands
    settle_rolled({"output": doubt}, {"output": row}, POLICY, lambda names: _spread_of([], 1e-3, gen))
    assert row.verdict.code == "rolled_call_worse"


def _spread_of(names, sigma, gen):
    from fusecheck.compare.noise_band import Spread
    s = Spread(runs=4)
    s.diffs = {n: [math.sqrt(2) * sigma * torch.randn(1000, generator=gen) for _ in range(4)] for n in names}
    return s
