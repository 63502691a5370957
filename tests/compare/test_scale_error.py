"""The systematic-scale check: compiled's least-squares slope against the golden, beta = sum(N g) / sum(g^2) - 1,
against eager's, beyond what independent element errors give it (compare/verdict.py `_scale`)."""
import pytest
import torch

from fusecheck.compare import Status, compare
from fusecheck.compare.metrics import pair_metrics
from fusecheck.policy import Policy, Ratios


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _noisy(g, sigma, seed, scale=1.0, dtype=torch.bfloat16):
    return ((g + sigma * torch.randn(g.shape, dtype=torch.float64, generator=_gen(seed))) * scale).to(dtype)


def test_the_metric_is_the_least_squares_slope_and_its_unit_standard_error():
    g = torch.randn(1000, dtype=torch.float64, generator=_gen(0))
    n = g * 1.003 + 1e-3 * torch.randn(1000, dtype=torch.float64, generator=_gen(1))
    m = pair_metrics(n, g)
    assert m.scale_error == pytest.approx(abs(float((n * g).sum() / (g * g).sum()) - 1), rel=1e-9)
    assert m.scale_error_unit_se == pytest.approx(float((n - g).square().sum().sqrt() / (g * g).sum()), rel=1e-9)
    assert pair_metrics(torch.zeros(4), torch.zeros(4)).scale_error == 0.0  # no golden to scale: no slope


@pytest.mark.parametrize("scale", [1.002, 0.995])
def test_a_systematic_scale_fails_where_the_rmse_ratio_passes(scale):
    """0.2-0.5% on every element (a mistyped epsilon, a truncating cast) at 1.3-2.2x eager's RMSE: only the slope
    tells it from noise."""
    g = torch.randn(4096, dtype=torch.float64, generator=_gen(0))
    c = compare(_noisy(g, 2e-3, 2, scale), _noisy(g, 2e-3, 1), g)
    assert c.verdict.status is Status.FAIL and c.error_ratio < 2.5
    assert [f.split(" ", 1)[0] for f in c.verdict.failed_checks][-1] == "scale_error", c.verdict.failed_checks


@pytest.mark.parametrize("seed", range(20))
def test_noise_without_a_slope_passes_at_any_size(seed):
    """1.9x eager's noise, no scale: the slope stays within what independent errors give it (20 draws)."""
    n = [16, 64, 1000, 65536][seed % 4]
    g = torch.randn(n, dtype=torch.float64, generator=_gen(100 + seed))
    c = compare(_noisy(g, 3.8e-3, 200 + seed), _noisy(g, 2e-3, 300 + seed), g)
    assert not any(f.startswith("scale_error") for f in c.verdict.failed_checks), c.verdict.failed_checks


def test_a_scale_on_a_few_elements_is_not_significant():
    """32 elements 0.5% large: within what 32 independent errors can give a slope."""
    g = torch.randn(32, dtype=torch.float64, generator=_gen(0))
    c = compare(_noisy(g, 2e-3, 2, 1.005), _noisy(g, 2e-3, 1), g)
    assert c.verdict.passed, c.verdict.message


def test_an_fp32_scale_below_the_tolerance_floor_passes():
    """fp32, a 1e-7 relative bias (an approximate rsqrt): under rtol / 10, not a finding."""
    g = torch.randn(65536, dtype=torch.float64, generator=_gen(0))
    c = compare(_noisy(g, 3e-8, 2, 1 + 1e-7, torch.float32), _noisy(g, 3e-8, 1, 1.0, torch.float32), g)
    assert "scale_error" not in " ".join(c.verdict.failed_checks)
    assert c.verdict.margins["scale_error"] < 1


def test_the_ratio_is_the_policys():
    g = torch.randn(4096, dtype=torch.float64, generator=_gen(0))
    compiled, eager = _noisy(g, 2e-3, 2, 1.002), _noisy(g, 2e-3, 1)
    loose = Policy(ratios=Ratios(scale=10.0))
    assert compare(compiled, eager, g, policy=loose).verdict.passed
    assert not compare(compiled, eager, g).verdict.passed


def test_a_gradient_zero_in_exact_arithmetic_has_no_significant_slope():
    """A key-bias gradient (softmax is shift-invariant): the golden is fp64 residue (~1e-17) and each run's error
    is the rounding of terms that cancelled (~1e-3), so |beta| ~ 1e13 on both sides, at any ratio; the slope's
    standard error grows with it (a red team's fewest-keys attention reached 21x the bound and passed). Compiled
    6x noisier than eager (other checks may fail it; this one must not), 10 draws."""
    over = 0
    for seed in range(10):
        g = 1e-17 * torch.randn(64, dtype=torch.float64, generator=_gen(seed))
        c = compare(_noisy(g, 6e-3, 10 + seed), _noisy(g, 1e-3, 20 + seed), g)
        over += c.verdict.margins["scale_error"] > 1
        assert not any(f.startswith("scale_error") for f in c.verdict.failed_checks), c.verdict.failed_checks
    assert over >= 5  # over the bound: the significance test is what keeps them quiet
