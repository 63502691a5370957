"""Eager's error as a distribution, not one draw: randomised-rounding eager runs made into eager-like
results, so the aggregate checks (RMSE, mean relative error, small-value counts) compare compiled with what
an equally valid run reaches, not with one lucky run.

Why. An aggregate check holds compiled's error to a ratio of eager's, and eager's error is one draw. Where
that draw is low by chance -- a tensor of a few elements, a gradient that is exactly zero in exact
arithmetic (a key bias under softmax's shift invariance, a conv weight whose scale batch norm cancels, a
top-1 router whose normalised weight is w / w), a model whose error is a few amplified roundings -- a correct
compile fails at 3-14x "eager's" RMSE while every randomised eager run is as far from the golden as compiled
(measured on the H200 drawn-config grid: Swin, Mamba2, MobileNetV2, ResNet, Qwen2-MoE; docs/verdict.md).

The model. Under noise_band.py's null model a perturbed run's difference from eager, d_k = p_k - e, is an
independent draw of c times eager's own error, c between sqrt 2 (a reassociated sum: two independent
accumulation errors) and sqrt 3 (stochastic against nearest rounding). So q_k = golden + d_k / sqrt 3 is an
eager-like result whose error is an independent draw at c / sqrt 3 <= 1 times eager's scale: never noisier
than eager, so a 3x-noisier compile still fails where eager's draw was typical, and a lucky draw is
outvoted by K others. Per aggregate metric (RMSE, mean relative error, small-value counts) the family's
value is the worse of eager's and the median over the q_k (the median: one run that crossed a decision does
not carry the rest). The per-element metrics keep eager's own values: the noise band judges them. The
systematic checks (scale, offset) also get eager's measured spread of their signed value over the K runs
(`NOISE_SUFFIX`): errors that share a source are few draws, which no independent-element formula sees.

No significant digits. Where the family's typical RMSE reaches the golden's own RMS, eager has no
significant digit in that tensor (Monte Carlo arithmetic's criterion, CADNA's "numerical noise"): a relative
check then compares noise with noise. Such a row is judged on RMSE alone, against the largest RMSE of the
family, and the report says so.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import torch

from fusecheck.compare import Status, Verdict, compare
from fusecheck.compare.metrics import OCTAVE_PREFIX, Metrics
from fusecheck.compare.verdict import NOISE_SUFFIX, SYSTEMATIC
from fusecheck.policy import Policy

FAMILY_SCALE = math.sqrt(3.0)  # the largest c the perturbation model predicts: q_k is never noisier than eager
# counts and structure, not errors: eager's own value stays
STRUCTURAL = frozenset({"numel", "bitwise_equal", "actual_nonfinite", "expected_nan", "expected_nonfinite",
                        "nonfinite_mismatches"})
# the largest error of any one element: eager's own value stays too. A median over runs of each run's worst
# element says nothing about any element in particular (a handful of elements 12% off in a bf16 output passed
# that way: 3 of 10 caught on the H200 grid against 7 of 12 before the family); the per-element checks that
# still fail are judged element by element against the noise band, from the same runs (check/settle.py)
PER_ELEMENT = frozenset({"max_abs", "max_rel", "small_value_max_abs", "ulp_max"})


@dataclass
class Family:
    """Eager's error metrics over eager and K eager-like runs (`metrics`, per key the worse of eager's and the
    median), the family's RMSEs, and whether eager has a significant digit in the tensor at all."""
    metrics: Metrics
    rmse: list[float]          # eager's first, then each q_k's
    golden_rms: float

    @property
    def runs(self) -> int:
        return len(self.rmse) - 1

    @property
    def typical_rmse(self) -> float:
        return max(self.rmse[0], statistics.median(self.rmse[1:])) if self.runs else self.rmse[0]

    @property
    def significant(self) -> bool:
        return self.typical_rmse < self.golden_rms


def _eager_like(golden: torch.Tensor, diff: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """In eager's dtype, so that every threshold of the policy is the one eager's row was judged by (the
    final rounding adds at most half an ulp: a little noisier than the model, never less)."""
    return (golden.double() + diff.to(golden.device, torch.float64) / FAMILY_SCALE).to(dtype)


def family_of(base: Metrics, golden: torch.Tensor, diffs: list[torch.Tensor], policy: Policy,
              dtype: torch.dtype, name: str = "") -> Family:
    """`base`: eager's error metrics against this golden (as the row was judged); `diffs`: each perturbed
    run's signed difference from eager (`Spread.diffs[name]`); `dtype`: eager's. Complex rows are judged on
    their (real, imag) pairs, as compare() does."""
    if golden.is_complex():
        golden = torch.view_as_real(golden.resolve_conj())
        diffs = [torch.view_as_real(d.resolve_conj()) if d.is_complex() else d for d in diffs]
        dtype = dtype.to_real() if dtype.is_complex else dtype
    drawn = []
    for d in diffs:
        if d.shape != golden.shape:
            continue
        q = _eager_like(golden, d, dtype)
        m = compare(q, q, golden, policy=policy, name=name).vs_golden
        if m is not None:
            drawn.append(m)
    values = dict(base.values)
    for k, v in base.values.items():
        if k in STRUCTURAL or k in PER_ELEMENT or k.startswith(OCTAVE_PREFIX):
            continue
        others = [m.values[k] for m in drawn if k in m.values and math.isfinite(m.values[k])]
        if others:
            med = statistics.median(others)
            values[k] = min(v, med) if k == "cosine" else max(v, med)
    same = [d for d in diffs if d.shape == golden.shape]
    if len(same) >= 2:  # each d = one run - eager: twice eager's variance when their errors are independent
        for metric, kind in SYSTEMATIC.items():
            values[metric + NOISE_SUFFIX] = math.sqrt(sum(kind.signed(d, golden) ** 2 for d in same) / (2 * len(same)))
    g = golden.double()
    finite = g[torch.isfinite(g)]
    golden_rms = float(finite.pow(2).mean().sqrt()) if finite.numel() else 0.0
    return Family(Metrics(values), [base.rmse] + [m.rmse for m in drawn], golden_rms)


def rmse_ratio(policy: Policy, numel: int) -> float:
    r = policy.ratios
    return r.small_tensor_rmse if numel < r.small_tensor_numel else r.rmse


def judge_without_digits(compiled: torch.Tensor, golden: torch.Tensor, family: Family, policy: Policy,
                         name: str = "") -> Verdict:
    """A row where eager has no significant digit: compiled's RMSE against ratio x the family's largest."""
    m = compare(compiled, compiled, golden, policy=policy, name=name).vs_golden
    ratio = rmse_ratio(policy, int(m.numel))
    limit = ratio * max(family.rmse)
    why = (f"eager has no significant digit here (the typical RMSE of eager and {family.runs} randomised-"
           f"rounding eager runs, {family.typical_rmse:.3g}, reaches the golden's own RMS {family.golden_rms:.3g}), "
           f"so the relative checks compare noise with noise; judged on RMSE alone: {m.rmse:.3g} vs the "
           f"family's largest {max(family.rmse):.3g} (limit {limit:.3g}, ratio {ratio:g})")
    margins = {"rmse_family": m.rmse / limit if limit > 0 else (0.0 if m.rmse == 0 else math.inf)}
    if m.rmse <= limit:
        return Verdict(Status.PASS, "not_worse_than_eager", why, margins=margins)
    return Verdict(Status.FAIL, "worse_than_eager", "worse than eager's family: " + why,
                   [f"rmse {m.rmse:.3g} vs family {max(family.rmse):.3g} (limit {limit:.3g})"], margins)
