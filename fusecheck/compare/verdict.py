"""The verdict: is the result (compiled, fused) not worse than the reference (eager) against the golden?

Formula (per output; docs/verdict.md compares it with torch's `same(fp64_ref)` and msprobe):
  1. identical bits to the reference                         -> PASS bitwise_equal
  2. exact rule (int/bool dtype, or a pure data-movement graph) and any bit differs -> FAIL
  3. NaN/Inf at positions where reference and golden agree but result does not     -> FAIL nan_inf_mismatch
  4. every element within atol + rtol*|ref| of the reference (policy tolerance)    -> PASS within_tolerance
  5. with a golden: for every registered ratio check,
        err(result, golden) <= ratio * max(err(reference, golden), floor)
     (ratios from the policy: RMSE 2 (3 below 1000 elements, as torch.same), MeanRel 2, MaxRel 10, MaxAbs 10,
     small-value errors 2, small-value MaxAbs 10; floors atol/10, rtol/10, rtol, atol, one element and
     max(atol, eager's RMSE); MaxRel is judged per octave of |golden| and must also exceed what chance
     gives at that octave's element count (compare/octaves.py), so one cancellation element cannot decide;
     the small-value error count and
     the mean relative error must also exceed their bounds significantly: a Poisson rate test and a
     z-test on the standard errors of the means, each at alpha = 0.01; the systematic scale, the error's
     least-squares slope on the golden, and the constant offset, its mean over rms(golden): each ratio 2 with
     floor rtol/10, z-tested against what independent element errors give)
     all hold -> PASS not_worse_than_eager, else FAIL worse_than_eager (each failed check is listed).
     Without a golden, step 4 failing is FAIL outside_tolerance.
A PASS at step 4 whose error against the golden is well above eager's says so in its message (honest notes).
A result closer to the golden than eager therefore passes even when most of its bits differ.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Callable

import torch

from fusecheck.compare.metrics import Metrics
from fusecheck.compare.octaves import octave_max_rel
from fusecheck.policy import Policy, Ratios, Tolerance


class Status(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    ERROR = "ERROR"   # cannot judge: bad input (empty, all-NaN golden, missing output)


@dataclass
class Verdict:
    status: Status
    code: str
    message: str
    failed_checks: list[str] = field(default_factory=list)
    # each golden check's largest ratio to its limit (1.0 = at the limit): how close the row came to flipping
    margins: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    def to_dict(self) -> dict:
        return {"status": self.status.value, "code": self.code, "message": self.message,
                "failed_checks": list(self.failed_checks), "margins": dict(self.margins)}


def _worse(ours: float, bound: float, theirs: float, ratio: float, ratios: Ratios, **_: Metrics) -> bool:
    return ours > bound


def _mean_significantly_worse(ours: float, bound: float, theirs: float, ratio: float, ratios: Ratios, *,
                              result: Metrics, reference: Metrics) -> bool:
    """For mean relative errors: is compiled's mean above `ratio` times eager's beyond their spread?

    A relative error is heavy-tailed: an element whose golden value is near zero against the rest of the
    tensor (a cancellation in a gradient sum) has RE near 1 for any rounding, and on a 32-element bias
    gradient that one element is most of the mean (measured: tiny Qwen2, bf16, mean RE 0.22 vs eager's
    0.063 from one element at 1/2000 of the tensor's scale, RMSE 1.3x). The test: z = (ours - ratio *
    theirs) / sqrt(se_ours^2 + ratio^2 se_theirs^2) with each side's standard error of the mean; fail when
    z exceeds the normal quantile of 1 - alpha (ratios.mean_rel_alpha). A systematic error over many
    elements has a small standard error and fails as before; one outlier element does not decide alone.
    """
    if ours <= bound:
        return False
    theirs_se = ratio * reference.mean_rel_se if ratio * theirs >= bound else 0.0  # not when the floor set it
    return _z_excess(ours, bound, result.mean_rel_se, theirs_se) > NormalDist().inv_cdf(1 - ratios.mean_rel_alpha)


def _z_excess(ours: float, bound: float, se_ours: float, se_theirs: float) -> float:
    """(ours - bound) in standard errors of both sides combined; infinite where neither side has a spread."""
    se = math.hypot(se_ours, se_theirs)
    return (ours - bound) / se if se else math.inf


def _count_significantly_worse(ours: float, bound: float, theirs: float, ratio: float, ratios: Ratios,
                               **_: Metrics) -> bool:
    """For error *counts*: is compiled's count more than `ratio` times eager's beyond chance?

    Counts of rare events (a few small-value elements in error) are Poisson noise: 5 against eager's 2 says
    nothing. The conditional test for two Poisson rates: given n = ours + theirs, ours ~ Binomial(n, p) with
    p = ratio / (1 + ratio) when compiled's rate is exactly `ratio` times eager's. Fail when
    P(X >= ours) < alpha (ratios.small_value_alpha), i.e. the excess is significant, not merely present.
    """
    if ours <= bound:
        return False
    n, k = int(ours + theirs), int(ours)
    p = ratio / (1.0 + ratio)
    if n > 2000:  # normal approximation of the binomial tail
        z = (k - 0.5 - n * p) / math.sqrt(n * p * (1 - p))
        tail = 0.5 * math.erfc(z / math.sqrt(2))
    else:
        tail = sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                            + i * math.log(p) + (n - i) * math.log1p(-p)) for i in range(k, n + 1))
    return tail < ratios.small_value_alpha


@dataclass(frozen=True)
class Judged:
    """What `judge` knows beyond the metrics: the dtype judged and the small-value threshold applied."""

    tolerance: Tolerance
    policy: Policy
    numel: int
    dtype: torch.dtype | None = None
    small_threshold: float | None = None
    abs_max: float | None = None  # the largest finite |eager|, |golden|: what bounds one element's weight


@dataclass(frozen=True)
class RatioCheck:
    """err(result) <= ratio * max(err(reference), floor), or with `additive` ratio * err(reference) + floor;
    `floor` keeps a near-zero eager error from turning float noise into a failure. `worse` decides, given
    that bound (counts use a significance test). `assess`, when set, replaces the whole-tensor comparison
    (MaxRel is judged per octave)."""

    metric: str
    ratio: Callable[[Ratios, float], float]  # (ratios, numel) -> allowed factor
    floor: Callable[[Tolerance, Metrics], float]
    worse: Callable[..., bool] = _worse  # (ours, bound, theirs, ratio, ratios, *, result, reference)
    assess: Callable[..., tuple[float, str | None]] | None = None  # (check, result, reference, Judged)
    additive: bool = False

    def evaluate(self, name: str, result: Metrics, reference: Metrics, ctx: Judged) -> tuple[float, str | None]:
        """(ratio to the limit, failure text or None)."""
        if self.assess is not None:
            return self.assess(self, result, reference, ctx)
        ours, theirs = getattr(result, self.metric), getattr(reference, self.metric)
        ratio = self.ratio(ctx.policy.ratios, ctx.numel)
        floor = self.floor(ctx.tolerance, reference)
        bound = ratio * theirs + floor if self.additive else ratio * max(theirs, floor)
        share = ours / bound if bound else (0.0 if ours == 0 else math.inf)
        if self.worse(ours, bound, theirs, ratio, ctx.policy.ratios, result=result, reference=reference):
            return share, f"{name} {ours:.3g} vs eager {theirs:.3g} (limit {bound:.3g}, ratio {ratio:g})"
        return share, None


def _max_rel_by_octave(check: RatioCheck, result: Metrics, reference: Metrics, ctx: Judged):
    if not result.octaves() or ctx.small_threshold is None:  # nothing non-small, or no scale: whole tensor
        return RatioCheck(check.metric, check.ratio, check.floor).evaluate("max_rel", result, reference, ctx)
    return octave_max_rel(result, reference, ratio=check.ratio(ctx.policy.ratios, ctx.numel),
                          rtol=ctx.tolerance.rtol, alpha=ctx.policy.ratios.max_rel_alpha, dtype=ctx.dtype,
                          small_threshold=ctx.small_threshold)


# dtypes whose significand makes a relative error of 1e-3 a loss of most of an element's bits (fp32: 2^14
# ulps), which no rounding order reaches except through cancellation; eager's own count is that baseline
DIGITS_LOST_DTYPES = (torch.float32, torch.float64)


def _digits_lost(check: "RatioCheck", result: Metrics, reference: Metrics, ctx: Judged):
    """Elements (small ones too) where compiled lost most of its significant bits, counted against eager's:
    a softmax whose tail is flushed to zero or sign-flipped is within any atol, and below the small-value
    threshold the relative checks never look, yet every such element has lost all its digits where eager kept
    them. Judged as a count (significantly more than `ratio` times eager's), only in fp32/fp64."""
    if ctx.dtype not in DIGITS_LOST_DTYPES:
        return 0.0, None
    return RatioCheck(check.metric, check.ratio, check.floor, check.worse).evaluate("digits_lost", result,
                                                                                    reference, ctx)


def _finite_pair(diff: torch.Tensor, golden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    d, g = diff.double().reshape(-1), golden.double().reshape(-1).to(diff.device)
    keep = torch.isfinite(d) & torch.isfinite(g)
    return d[keep], g[keep]


def _signed_slope(diff: torch.Tensor, golden: torch.Tensor) -> float:
    d, g = _finite_pair(diff, golden)
    den = float((g * g).sum())
    return float((d * g).sum()) / den if den > 0 else 0.0


def _signed_offset(diff: torch.Tensor, golden: torch.Tensor) -> float:
    d, g = _finite_pair(diff, golden)
    den = math.sqrt(d.numel() * float((g * g).sum()))
    return float(d.sum()) / den if den > 0 else 0.0


@dataclass(frozen=True)
class Systematic:
    """An error that moves every element the same way, which the RMSE ratio weighs no more than noise: `metric`
    (>= 0) and its standard error per `unit` when the element errors are independent (`se`), the policy's ratio
    and significance level (`Ratios` fields), what a failure says it is, and `signed(diff, golden)`: the value's
    signed change for a difference `diff` between two runs (eager's family measures its spread with it)."""

    se: str
    ratio: str
    alpha: str
    what: str
    signed: Callable[[torch.Tensor, torch.Tensor], float]
    unit: Callable[[Judged], float] = lambda ctx: 1.0


# A systematic value's spread over eager's randomised runs, in the family's metrics (compare/family.py): errors
# that share a source (a row's mean rounded once, then subtracted from 8,192 elements) are few draws, not n, and
# the standard error independent elements give is then ~sqrt(n / draws) too small; the measured one is not.
NOISE_SUFFIX = "_noise"


SYSTEMATIC = {
    # the least-squares slope of the error on the golden, beta = sum(N g) / sum(g^2) - 1: a wrong norm epsilon, a
    # scale factor off by 1%, a truncating cast (an epsilon of 1e-2 for 1e-5 in bf16 reached 2.2x eager's RMSE
    # and passed that). Independent errors of RMSE s give |beta| a standard error of at most s sqrt(n) max|g| /
    # sum(g^2) (each element's weight is g / sum(g^2)): `scale_error_unit_se` times the largest |g|
    "scale_error": Systematic("scale_error_unit_se", "scale", "scale_alpha", "a systematic scale", _signed_slope,
                              lambda ctx: ctx.abs_max),
    # the mean error over rms(golden): a constant added (a bias read twice, a shifted zero point), which has no
    # slope on a zero-mean golden (every element of a bf16 weight gradient +1% of its mean magnitude: RMSE 1.83x
    # eager's, 70 standard errors from zero). Independent errors give it sqrt(sum e^2 / n) / sqrt(n) / rms(g)
    "offset_error": Systematic("offset_error_se", "offset", "offset_alpha", "a constant offset", _signed_offset),
}


def _systematic(check: "RatioCheck", result: Metrics, reference: Metrics, ctx: Judged):
    """Compiled's systematic error against the golden (`SYSTEMATIC`), against eager's: the excess over `ratio` x
    eager's must be significant against both sides' standard errors (alpha), and at least rtol / 10 (the floor
    the mean relative error has). Errors that share a source are not independent: a row failed here is judged
    again against eager's randomised-rounding family (settle), whose runs measure the value's spread."""
    kind = SYSTEMATIC[check.metric]
    unit = kind.unit(ctx)
    if not unit or not math.isfinite(unit):
        return 0.0, None
    ratios = ctx.policy.ratios
    ours, theirs = getattr(result, check.metric), getattr(reference, check.metric)
    bound, se, z = systematic_excess(check.metric, result, reference, check.floor(ctx.tolerance, reference), unit,
                                     ratios)
    share = ours / bound if bound else (0.0 if ours == 0 else math.inf)
    if ours <= bound or z <= NormalDist().inv_cdf(1 - getattr(ratios, kind.alpha)):
        return share, None
    return share, (f"{check.metric} {ours:.3g} vs eager {theirs:.3g} (limit {bound:.3g}, ratio "
                   f"{getattr(ratios, kind.ratio):g}; {kind.what}, beyond its standard error {se:.3g} from "
                   "noise)")


def systematic_excess(metric: str, result: Metrics, reference: Metrics, floor: float, unit: float,
                      ratios: Ratios) -> tuple[float, float, float]:
    """`_systematic`'s test: (the bound on compiled's value, the standard error of the two sides combined, the
    excess over the bound in those standard errors). Each side's standard error is the larger of what independent
    element errors give and, where eager's family measured it (`NOISE_SUFFIX`), eager's own spread (compiled's:
    up to `ratio` times it, as its noise may be). Eager's side counts only where its value, not the floor, set
    the bound (benchmarks/scale_significance.py reads these)."""
    kind = SYSTEMATIC[metric]
    ratio = getattr(ratios, kind.ratio)
    theirs = getattr(reference, metric)
    bound = ratio * max(theirs, floor)
    noise = reference.values.get(metric + NOISE_SUFFIX, 0.0)
    ours_se = max(unit * getattr(result, kind.se), ratio * noise)
    theirs_se = ratio * max(unit * getattr(reference, kind.se), noise) if theirs >= floor else 0.0
    return bound, math.hypot(ours_se, theirs_se), _z_excess(getattr(result, metric), bound, ours_se, theirs_se)


RATIO_CHECKS: dict[str, RatioCheck] = {
    # torch.same's rule: rmse(res) <= m * rmse(ref) + tol / 10, with the policy's (scaled) atol as tol. The
    # added tenth of atol is the output's rounding granularity at the tensor's scale: an excess below it is
    # no evidence (measured: a 32-element bf16 batch-norm weight gradient of ResNet, values up to 2.2, RMSE
    # 2.9e-3 compiled vs 9.2e-4 eager on CUDA, both below one bf16 step (7.8e-3) of its largest values;
    # torch's rule passes it, the earlier max(eager, floor) form failed it, on 1 of 280 stock-Inductor runs)
    "rmse": RatioCheck("rmse", lambda r, n: r.small_tensor_rmse if n < r.small_tensor_numel else r.rmse,
                       lambda t, m: t.atol / 10, additive=True),
    # the excess must exceed the spread of the relative errors (one near-zero element is not a verdict)
    "mean_rel": RatioCheck("mean_rel", lambda r, n: r.mean_rel, lambda t, m: t.rtol / 10, _mean_significantly_worse),
    # per octave of |golden|, beyond chance at that octave's element count (compare/octaves.py): one
    # element where contributions cancel is one draw of noise against another, not a verdict
    "max_rel": RatioCheck("max_rel", lambda r, n: r.max_rel, lambda t, m: t.rtol, assess=_max_rel_by_octave),
    # the largest error anywhere against eager's largest anywhere: the per-octave MaxRel gives one element alone in
    # its octave (the tensor's largest, say) a chance limit of ~6e4x, so a bf16 weight gradient's largest element
    # 30% off (78x eager's largest error) passed every check. A per-element check: a row it fails is settled by
    # each element's noise band (check/settle.py), which clears an element where eager was lucky, not a wrong one
    "max_abs": RatioCheck("max_abs", lambda r, n: r.max_rel, lambda t, m: t.atol),
    # a count: one element is always tolerated, and the excess must be statistically significant
    "small_value_errors": RatioCheck("small_value_errors", lambda r, n: r.small_value, lambda t, m: 1.0,
                                     _count_significantly_worse),
    # the count test needs ~12 errors to be significant against eager's 0; a few small values far off
    # (exact zeros written as 0.25) are a magnitude, not a count: MaxAbs over the small values, like MaxRel.
    # Floor: atol, or the noise eager makes on this tensor (its RMSE) when larger: an error below that is
    # no evidence (a weight gradient with errors ~0.1 everywhere has its few small entries off by ~0.1 too)
    "small_value_max_abs": RatioCheck("small_value_max_abs", lambda r, n: r.small_value_max_abs,
                                      lambda t, m: max(t.atol, m.rmse)),
    # the count of elements with RE >= 1e-3 (fp32/fp64), significance-tested as the small-value count; the
    # one check that a PASS within tolerance must also pass (judge's step 4)
    "digits_lost": RatioCheck("digits_lost", lambda r, n: r.digits_lost, lambda t, m: 1.0,
                              _count_significantly_worse, assess=_digits_lost),
    # systematic errors (the error's slope on the golden, its mean), beyond what independent noise gives them
    "scale_error": RatioCheck("scale_error", lambda r, n: r.scale, lambda t, m: t.rtol / 10, assess=_systematic),
    "offset_error": RatioCheck("offset_error", lambda r, n: r.offset, lambda t, m: t.rtol / 10,
                               assess=_systematic),
}
# checks whose failure the tolerance shortcut (step 4) does not override: an element that lost its digits is
# within atol of eager exactly when it is small, which is where the other checks defer to atol
TOLERANCE_VETO = ("digits_lost",)


def judge(*, vs_reference: Metrics, vs_golden: Metrics | None, reference_vs_golden: Metrics | None,
          tolerance: Tolerance, policy: Policy, exact: bool, exact_reason: str = "",
          dtype: torch.dtype | None = None, small_threshold: float | None = None,
          abs_max: float | None = None) -> Verdict:
    n = int(vs_reference.numel)
    ctx = Judged(tolerance, policy, n, dtype, small_threshold, abs_max)
    if vs_reference.bitwise_equal == vs_reference.numel:
        return Verdict(Status.PASS, "bitwise_equal", "bitwise equal to eager")
    if exact or tolerance.exact:
        differ = n - int(vs_reference.bitwise_equal) if vs_reference.bitwise_equal >= 0 else int(vs_reference.mismatches)
        if not exact:
            followed = _follows_float_ties(vs_golden, reference_vs_golden, differ, n, policy.ratios)
            if followed is not None:
                return followed
        why = exact_reason or "integer/bool outputs must be exact"
        return Verdict(Status.FAIL, "exact_mismatch", f"{differ} of {n} elements differ from eager; {why}")

    if vs_reference.nonfinite_mismatches:
        k = int(vs_reference.nonfinite_mismatches)
        golden_sides_with_result = (vs_golden is not None and reference_vs_golden is not None
                                    and vs_golden.nonfinite_mismatches == 0
                                    and reference_vs_golden.nonfinite_mismatches > 0)
        if not golden_sides_with_result:
            where = ("compiled has NaN/Inf where eager has finite values" if vs_reference.actual_nonfinite
                     > vs_reference.expected_nonfinite else "NaN/Inf positions of compiled and eager differ")
            return Verdict(Status.FAIL, "nan_inf_mismatch", f"{where} ({k} positions)")

    if vs_reference.mismatches == 0:
        margins, failed = ({}, []) if vs_golden is None or reference_vs_golden is None else \
            _golden_checks(vs_golden, reference_vs_golden, ctx)
        vetoed = [f for f in failed if f.startswith(TOLERANCE_VETO)]
        if vetoed:
            return Verdict(Status.FAIL, "worse_than_eager",
                           f"within rtol={tolerance.rtol:g} atol={tolerance.atol:g} of eager, but worse than eager "
                           "against the golden: " + "; ".join(failed), failed, margins)
        note = tolerance_pass_note(vs_golden, reference_vs_golden, failed, policy.ratios)
        return Verdict(Status.PASS, "within_tolerance",
                       f"within rtol={tolerance.rtol:g} atol={tolerance.atol:g} of eager" + note, margins=margins)
    if vs_golden is None or reference_vs_golden is None:
        return Verdict(Status.FAIL, "outside_tolerance",
                       f"{int(vs_reference.mismatches)} of {n} elements outside rtol={tolerance.rtol:g} "
                       f"atol={tolerance.atol:g} of eager, and no golden to judge against")

    margins, failed = _golden_checks(vs_golden, reference_vs_golden, ctx)
    if failed:
        return Verdict(Status.FAIL, "worse_than_eager", "worse than eager against the golden: " + "; ".join(failed),
                       failed, margins)
    return Verdict(Status.PASS, "not_worse_than_eager",
                   f"{int(vs_reference.mismatches)} elements differ from eager beyond tolerance, but the error "
                   f"against the golden is not worse than eager's (rmse {vs_golden.rmse:.3g} vs {reference_vs_golden.rmse:.3g})",
                   margins=margins)


def _follows_float_ties(vs_golden: Metrics | None, reference_vs_golden: Metrics | None, differ: int, n: int,
                        ratios: Ratios) -> Verdict | None:
    """An integer/bool result made from floats (`z > 0.05`, a count of them) where eager itself disagrees with
    the golden: its values follow near-ties of the floats, so each run flips those its own noise decides. The
    claim is the same as for floats -- not worse than eager against the golden: compiled's count of elements
    that differ from the golden is not significantly above `decision_tie` times eager's, and its largest
    difference is at most `decision_tie` times eager's. None (exactness decides) where eager equals the golden
    bit for bit -- pure integer work, or floats far from any tie -- or without a golden."""
    if vs_golden is None or reference_vs_golden is None or ratios.decision_tie <= 0:
        return None
    theirs, ours = int(reference_vs_golden.mismatches), int(vs_golden.mismatches)
    if theirs == 0 or vs_golden.nonfinite_mismatches or reference_vs_golden.nonfinite_mismatches:
        return None
    ratio = ratios.decision_tie
    counted = _count_significantly_worse(ours, ratio * theirs, theirs, ratio, ratios)
    farther = vs_golden.max_abs > ratio * reference_vs_golden.max_abs
    if counted or farther:
        return Verdict(Status.FAIL, "exact_mismatch",
                       f"{differ} of {n} elements differ from eager, and compiled is worse than eager against the "
                       f"golden: {ours} element(s) differ from it (eager: {theirs}), by up to {vs_golden.max_abs:g} "
                       f"(eager: {reference_vs_golden.max_abs:g}; limit {ratio:g}x eager's, count significance-tested)")
    return Verdict(Status.PASS, "follows_float_ties",
                   f"{differ} of {n} integer/bool elements differ from eager; eager itself differs from the golden "
                   f"at {theirs} (these values follow near-ties of floats), compiled at {ours}, by up to "
                   f"{vs_golden.max_abs:g} (eager: {reference_vs_golden.max_abs:g}): not worse than eager")


def _golden_checks(vs_golden: Metrics, reference_vs_golden: Metrics, ctx: Judged) -> tuple[dict[str, float], list[str]]:
    margins, failed = {}, []
    for name, check in RATIO_CHECKS.items():
        margins[name], failure = check.evaluate(name, vs_golden, reference_vs_golden, ctx)
        if failure:
            failed.append(failure)
    return margins, failed


TOLERANCE_DECIDED = "PASS within tolerance"  # what a PASS says when the tolerance, not the golden, decided it


def tolerance_pass_note(vs_golden: Metrics | None, reference_vs_golden: Metrics | None, failed: list[str],
                        ratios: Ratios) -> str:
    """A PASS by tolerance says so when its error against the golden is well above eager's: the shortcut
    decided, not the golden (a ResNet-18 fp32 on CPU passes this way at 1.95x eager's RMSE)."""
    if vs_golden is None or reference_vs_golden is None:
        return ""
    ours, theirs = vs_golden.rmse, reference_vs_golden.rmse
    factor = ours / theirs if theirs else (math.inf if ours else 0.0)
    if not failed and factor <= ratios.note_rmse:
        return ""
    text = f"; {TOLERANCE_DECIDED}; compiled RMSE {factor:.3g}x eager's against the golden"
    return text + (f" (the golden checks alone would fail: {'; '.join(failed)})" if failed else "")
