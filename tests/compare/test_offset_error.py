"""The constant-offset check: compiled's mean error over rms(golden) against eager's, beyond what independent
element errors give it (compare/verdict.py `SYSTEMATIC["offset_error"]`), and the signed sum every core now
reduces for it (`sum_err`), checked between cores by its Cauchy-Schwarz bound."""
import pytest
import torch

from fusecheck.compare import Status, compare
from fusecheck.compare.accumulators import COLUMNS, rows_agree
from fusecheck.compare.metrics import pair_metrics
from fusecheck.policy import Policy, Ratios


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _noisy(g, sigma, seed, offset=0.0, dtype=torch.bfloat16):
    return (g + sigma * torch.randn(g.shape, dtype=torch.float64, generator=_gen(seed)) + offset).to(dtype)


def test_the_metric_is_the_mean_error_over_the_goldens_rms_with_its_standard_error():
    g = torch.randn(1000, dtype=torch.float64, generator=_gen(0))
    n = g + 3e-3 + 1e-3 * torch.randn(1000, dtype=torch.float64, generator=_gen(1))
    m = pair_metrics(n, g)
    rms = float(g.square().mean().sqrt())
    assert m.offset_error == pytest.approx(abs(float((n - g).mean())) / rms, rel=1e-9)
    assert m.offset_error_se == pytest.approx(float((n - g).square().mean().sqrt()) / 1000 ** 0.5 / rms, rel=1e-9)
    assert pair_metrics(torch.ones(4), torch.zeros(4)).offset_error == 0.0  # no golden magnitude: RMSE judges


@pytest.mark.parametrize("sign", [1, -1])
def test_a_constant_offset_fails_where_the_rmse_ratio_passes(sign):
    """Every element of a zero-mean bf16 tensor shifted by eager's RMSE (a bias added twice, at a quarter of a
    bf16 step): compiled's RMSE 1.4x eager's, no slope on the golden; only the mean error tells it from noise."""
    g = torch.randn(4096, dtype=torch.float64, generator=_gen(0))
    c = compare(_noisy(g, 2e-3, 2, sign * 2e-3), _noisy(g, 2e-3, 1), g)
    assert c.verdict.status is Status.FAIL and c.error_ratio < 2, c.verdict.message
    failed = [f.split(" ", 1)[0] for f in c.verdict.failed_checks]
    assert "offset_error" in failed and "scale_error" not in failed and "rmse" not in failed, failed


@pytest.mark.parametrize("seed", range(20))
def test_noise_without_an_offset_passes_at_any_size(seed):
    """1.9x eager's noise, no offset: the mean stays within what independent errors give it (20 draws)."""
    n = [16, 64, 1000, 65536][seed % 4]
    g = torch.randn(n, dtype=torch.float64, generator=_gen(100 + seed))
    c = compare(_noisy(g, 3.8e-3, 200 + seed), _noisy(g, 2e-3, 300 + seed), g)
    assert not any(f.startswith("offset_error") for f in c.verdict.failed_checks), c.verdict.failed_checks


def test_an_offset_on_a_few_elements_is_not_significant():
    g = torch.randn(24, dtype=torch.float64, generator=_gen(0))
    c = compare(_noisy(g, 2e-3, 2, 1.5e-3), _noisy(g, 2e-3, 1), g)
    assert not any(f.startswith("offset_error") for f in c.verdict.failed_checks), c.verdict.failed_checks


def test_an_fp32_offset_below_the_tolerance_floor_passes():
    """fp32, an offset of 1e-7 of the golden's RMS: under rtol / 10, not a finding, however significant."""
    g = torch.randn(65536, dtype=torch.float64, generator=_gen(0))
    c = compare(_noisy(g, 3e-8, 2, 1e-7, torch.float32), _noisy(g, 3e-8, 1, 0.0, torch.float32), g)
    assert "offset_error" not in " ".join(c.verdict.failed_checks)
    assert c.verdict.margins["offset_error"] < 1


def test_an_offset_eager_has_too_is_not_compileds_fault():
    """Both runs shifted the same way (eager's own kernel biased): compiled is not worse than eager."""
    g = torch.randn(4096, dtype=torch.float64, generator=_gen(0))
    c = compare(_noisy(g, 2e-3, 2, 2e-3), _noisy(g, 2e-3, 1, 2e-3), g)
    assert c.verdict.passed, c.verdict.message


def test_the_ratio_is_the_policys():
    g = torch.randn(4096, dtype=torch.float64, generator=_gen(0))
    compiled, eager = _noisy(g, 2e-3, 2, 2e-3), _noisy(g, 2e-3, 1)
    assert compare(compiled, eager, g, policy=Policy(ratios=Ratios(offset=100.0))).verdict.passed
    assert not compare(compiled, eager, g).verdict.passed


@pytest.mark.parametrize("name", ["sum_err", "dot"])
def test_a_cores_signed_sum_agrees_to_rounding_of_its_bound_and_not_beyond(name):
    """A signed sum cancels towards 0, so its rounding is bounded by the sums of squares (Cauchy-Schwarz), not by
    itself: a rounding-sized difference agrees, a lost term does not. Rows from the torch core itself."""
    g = torch.tensor([1.0, -1.0, 1e-3, -1e-3] * 10, dtype=torch.float64)
    n = g.abs() if name == "dot" else g + torch.tensor([1e-2, -1e-2] * 20, dtype=torch.float64)  # sums cancel to ~0
    from fusecheck.compare.cores import torch_core
    fp, ip = torch_core.params(torch.float64, mant=52, min_eb=-1022, rtol=1e-5, atol=1e-5, small_threshold=2.0 ** -20,
                               small_atol=1e-5, octave_base=-21)
    want = torch_core.chunk_partials([n, g], ((0, 1),), torch.float64, fp, ip)
    col = COLUMNS.index(name)
    assert abs(float(want[0, col])) < 1e-12
    for by, agree in ((1e-14, True), (1e-3, False)):
        got = want.clone()
        got[:, col] += by
        assert rows_agree(got, want, 1e-9) is agree


def _rows_shifted(g, per_row, seed, sigma=1e-7):
    """fp32 runs whose error is one shared value per row (a row mean rounded once and subtracted) plus a little
    independent noise."""
    noise = sigma * torch.randn(g.shape, dtype=torch.float64, generator=_gen(seed))
    return (g + per_row[:, None] + noise).float()


def test_errors_shared_by_rows_are_few_draws_and_eagers_family_measures_them():
    """Four rows of 8,192: the mean error is four draws. Compiled's row errors 2.4x eager's by chance fail the
    formula for independent elements, and pass against eager's family, whose runs draw the row errors anew and
    so measure the offset's real spread (the red team's centred-rows false FAIL, in numbers)."""
    from fusecheck.compare.family import family_of
    from fusecheck.policy import Policy

    g = torch.randn(4, 8192, dtype=torch.float64, generator=_gen(0))
    eager = _rows_shifted(g, torch.tensor([-2.2e-5, -2.4e-6, -6.6e-7, 2.2e-6], dtype=torch.float64), 1)
    compiled = _rows_shifted(g, torch.tensor([8.7e-6, -2.4e-6, -3.1e-5, -2.8e-5], dtype=torch.float64), 2)
    first = compare(compiled, eager, g)
    assert [f.split(" ", 1)[0] for f in first.verdict.failed_checks] == ["offset_error"], first.verdict.message
    runs = [_rows_shifted(g, 1.5e-5 * torch.randn(4, dtype=torch.float64, generator=_gen(10 + k)), 20 + k)
            for k in range(8)]
    family = family_of(first.reference_vs_golden, g, [(r.double() - eager.double()).float() for r in runs],
                       Policy(), torch.float32)
    assert family.metrics.offset_error_noise > 10 * first.reference_vs_golden.offset_error_se
    again = compare(compiled, eager, g, reference_vs_golden=family.metrics)
    assert again.verdict.passed, again.verdict.message
    planted = _rows_shifted(g, torch.full((4,), 2e-4, dtype=torch.float64), 3)  # every row 10x eager's spread
    assert not compare(planted, eager, g, reference_vs_golden=family.metrics).verdict.passed
