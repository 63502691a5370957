"""Elements where eager has no significant digit (fusecheck/check/digits.py, settled in check/settle.py).

A gradient with heavy cancellation has elements whose golden value is far below the noise of the terms that
cancelled. The mean relative error divides each element's error by that value, so a handful of them decide
it: a correct compile whose noise there is as large as eager's fails the family on mean_rel (noise over
noise), and passes once those elements are judged on RMSE against the family and the others on every check.
A compile worse where eager has digits, or far noisier where it has none, still fails."""
import math

import torch

from fusecheck.check.rows import RowJudge
from fusecheck.check.settle import settle
from fusecheck.compare.noise_band import Spread
from fusecheck.policy import Policy

N, K, TINY = 4096, 8, 1024


def _row(digit_err: float, no_digit_err: float, tiny_err: float, seed: int = 0):
    """Half the elements |golden| ~ 1 with noise 1e-5 (a long fp32 sum: beyond the tolerance, so judged);
    half cancellation residue under noise 1e-2: |golden| in 1e-3 .. 5e-3, and 1024 elements near 1e-6 (above the small-value threshold, so in the
    relative checks), which decide the mean relative error. Compiled's error: `digit_err` x eager's scale on
    the first half, `no_digit_err` x on the second, `tiny_err` x on the 1024."""
    gen = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    half = N // 2
    u = lambda n: torch.rand(n, generator=gen, dtype=torch.float64)  # noqa: E731
    g = torch.cat([1 + u(half), 1e-3 * (1 + 4 * u(half - TINY)), 1e-6 * (1 + u(TINY))])
    sign = torch.where(u(N) < 0.5, -1.0, 1.0).double()
    g = g * sign
    scale = torch.cat([torch.full((half,), 1e-5, dtype=torch.float64), torch.full((half,), 1e-2, dtype=torch.float64)])
    eager = (g + scale * rnd(N)).float()
    c_scale = scale * torch.cat([torch.full((half,), digit_err), torch.full((half,), no_digit_err)]).double()
    c_scale[-TINY:] = 1e-2 * tiny_err
    compiled = (g + c_scale * rnd(N)).float()
    diffs = [(math.sqrt(3) * scale * rnd(N)).float() for _ in range(K)]
    judge = RowJudge(eager={"grad.w": eager}, compiled={"grad.w": compiled}, policy=Policy())
    judge.judge("grad.w", g)
    spread = Spread(runs=K)
    spread["grad.w"] = torch.stack([d.abs() for d in diffs]).amax(0)
    spread.diffs["grad.w"] = diffs
    notes = settle(judge, lambda names, runs, first: spread)
    return judge.rows["grad.w"], notes


def test_noise_over_noise_in_the_mean_relative_error_does_not_fail_a_correct_compile():
    """The mean relative error is settled element by element (each element against its own band) before the
    split is asked; either way the row passes and says which checks flagged it."""
    row, notes = _row(digit_err=1.0, no_digit_err=1.0, tiny_err=2.4)
    assert row.passed, row.verdict.message
    assert "mean_rel" in row.verdict.message
    assert ("noise band" in row.verdict.message
            or ("no significant digit at" in row.verdict.message
                and any("where eager has a significant digit" in n for n in notes))), row.verdict.message


def test_worse_where_eager_has_digits_still_fails():
    row, _ = _row(digit_err=4.0, no_digit_err=1.0, tiny_err=2.4)
    assert not row.passed
    assert "where eager has a significant digit" in row.verdict.message
    # the part settled on its own names its call and prefixes its margins once
    assert row.verdict.message.count("compiled call)") == 1, row.verdict.message
    assert any(k.startswith("settled.") for k in row.verdict.margins)
    assert not any(k.startswith("settled.settled.") for k in row.verdict.margins), row.verdict.margins


def test_far_noisier_where_eager_has_no_digit_still_fails():
    row, _ = _row(digit_err=1.0, no_digit_err=6.0, tiny_err=6.0)
    assert not row.passed
    assert "no significant digit" in row.verdict.message
