"""judge_band: compiled against each element's noise band, counted on a ladder of thresholds; and the band as
eager's error in the per-octave MaxRel and small-value MaxAbs checks."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import torch

from fusecheck.compare.noise_band.null_model import (CALIBRATION_CONFIDENCE, DEFAULT_C, LADDER, MAX_C,
                                                     MIN_CALIBRATION, _c_grid, _ladder_tail, binom_sf,
                                                     median_max_ratio, smallest_failing_count)
from fusecheck.compare.noise_band.rounding import _PRECISION

# --- judge_band -----------------------------------------------------------------------------------------

@dataclass
class BandResult:
    passed: bool
    message: str
    stats: dict[str, Any] = field(default_factory=dict)
    margin: float = 0.0  # the largest count / limit over the ladder; > 1 fails

    def to_dict(self) -> dict:
        return {"passed": self.passed, "message": self.message, "margin": self.margin, "stats": dict(self.stats)}


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def _ulp(g_abs: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of `dtype` at |golden| (the subnormal spacing below the smallest normal)."""
    fi = torch.finfo(dtype)
    p = _PRECISION.get(dtype, int(round(-math.log2(fi.eps))) + 1)
    e = torch.frexp(g_abs)[1].clamp_min(math.frexp(fi.tiny)[1])  # g = m 2^e, m in [0.5, 1)
    return torch.ldexp(torch.ones_like(g_abs), e - p)


def _flat_chunks(tensors, chunk: int):
    n = tensors[0].numel()
    flats = [t.reshape(-1) for t in tensors]
    for s in range(0, n, chunk):
        yield s, [f[s:s + chunk] for f in flats]


def judge_band(compiled: torch.Tensor, eager: torch.Tensor, golden: torch.Tensor,
               spread: torch.Tensor | None, *, runs: int, ratio: float = 2.0, alpha: float = 1e-5,
               dtype: torch.dtype | None = None, abs_floor: float | None = None, calibrate: bool = True,
               c: float | None = None, ladder: tuple[float, ...] = LADDER,
               eager_golden: torch.Tensor | None = None,
               calibration: tuple[torch.Tensor, torch.Tensor] | None = None,
               chunk_elems: int = 1 << 22) -> BandResult:
    """Is compiled outside eager's per-element noise band on more elements than chance allows? See the
    module docstring for the band, the null model and the ladder. `spread`: `eager_spread`'s tensor for this
    result (None: the band is eager's error and the floors, runs=0). `runs`: the K that made it. `ratio`: r,
    how much noisier than eager a correct compiled may be (the policy's RMSE ratio). `alpha`: the overall
    false-alarm level (Bonferroni over the ladder). `dtype`: whose unit roundoff and ulp (default: eager's).
    `abs_floor`: the band's absolute floor (default: the smallest normal of the dtype). `c`: fix the spread's
    scale instead of measuring it (`calibrate`). `eager_golden`: eager's own golden when the row's golden
    followed compiled's near-tied decisions (fusecheck/golden/choices/): eager's error is then the worse of its
    error against both, as rows.py does for the per-octave MaxRel (c is measured against its own golden).
    `calibration`: `Spread.calibration(name)`, (first run's spread, max of the others'): c is then measured on
    elements whose first run moved them by >= 2 ulps, as median(rest / |e|) / median(max of K-1 |N| / |N|),
    free of the selection bias that choosing elements by |e| itself has (which underestimates c, i.e. only
    costs power: the fallback when no calibration pair is given)."""
    dtype = dtype or eager.dtype
    if eager.is_complex():
        compiled, eager, golden = (torch.view_as_real(t.resolve_conj()) for t in (compiled, eager, golden))
        spread = None if spread is None else spread.unsqueeze(-1).expand(*spread.shape, 2)
        eager_golden = None if eager_golden is None else torch.view_as_real(eager_golden.resolve_conj())
        calibration = None
        dtype = eager.dtype
    if not dtype.is_floating_point:
        raise TypeError(f"judge_band judges floating results, not {dtype}")
    runs = 0 if spread is None else int(runs)
    u = unit_roundoff(dtype)
    floor = float(abs_floor) if abs_floor is not None else torch.finfo(dtype).tiny
    lad = torch.tensor(ladder, dtype=torch.float64)
    counts = torch.zeros(len(ladder), dtype=torch.int64)
    n = excluded = nonfinite = 0
    zmax, zarg, worst = 0.0, -1, None
    ratios: list[torch.Tensor] = []
    tensors = [compiled, eager, golden] + ([spread] if spread is not None else [])
    tensors += [eager_golden] if eager_golden is not None else []
    split = calibration is not None and spread is not None and runs >= 2 and c is None and calibrate
    if split:
        tensors += list(calibration)
    device = eager.device
    for start, parts in _flat_chunks([t.to(device) for t in tensors], chunk_elems):
        cc, ee, gg = (x.double() for x in parts[:3])
        ok = torch.isfinite(gg) & torch.isfinite(ee)
        excluded += int((~ok).sum())
        err_e = (ee - gg).abs()
        own_err = err_e
        if eager_golden is not None:
            own = parts[4 if spread is not None else 3].double()
            own_err = torch.where(torch.isfinite(own), (ee - own).abs(), err_e)
            err_e = torch.maximum(err_e, own_err)
        band = torch.maximum(err_e, gg.abs() * u).clamp_min(floor)
        if spread is not None:
            band = torch.maximum(band, parts[3].double().nan_to_num(0.0))
        err_c = (cc - gg).abs()
        z = torch.where(torch.isfinite(cc), err_c / band, torch.full_like(band, math.inf))
        z = torch.where(ok, z, torch.zeros_like(z))
        nonfinite += int((ok & ~torch.isfinite(cc)).sum())
        n += int(ok.sum())
        above = torch.searchsorted(lad.to(z.device), z)  # the number of rungs below each z
        counts += torch.bincount(above.cpu(), minlength=len(ladder) + 1).flip(0).cumsum(0).flip(0)[1:]
        m, i = z.max(0) if z.numel() else (torch.tensor(0.0), torch.tensor(0))
        if float(m) > zmax or zarg < 0:
            zmax, zarg = float(m), start + int(i)
            worst = (float(cc[i]), float(ee[i]), float(gg[i]), float(band[i]))
        r = None
        if split:
            first, rest = parts[-2].double(), parts[-1].double()
            resolved = ok & (first >= 2 * _ulp(gg.abs(), dtype)) & (own_err > 0)
            r = rest[resolved] / own_err[resolved]
        elif calibrate and spread is not None and c is None:
            resolved = ok & (own_err >= _ulp(gg.abs(), dtype)) & (own_err > 0)
            r = parts[3].double()[resolved] / own_err[resolved]
        if r is not None:
            if r.numel() > 200_000:  # enough for a median; keep memory bounded on huge tensors
                r = r[:: r.numel() // 200_000 + 1]
            ratios.append(r.cpu())
    stats: dict[str, Any] = {"n": n, "runs": runs, "ratio": ratio, "alpha": alpha, "excluded_nonfinite": excluded,
                             "max_z": zmax, "argmax": zarg}
    if worst is not None:
        stats.update(dict(zip(("compiled_at_max", "eager_at_max", "golden_at_max", "band_at_max"), worst)))
    if n == 0:
        return BandResult(True, "no element with a finite golden and eager to judge", stats, 0.0)
    if nonfinite:  # no rounding turns a finite value into NaN/Inf where eager and the golden are finite
        stats["nonfinite_compiled"] = nonfinite
        return BandResult(False, f"{nonfinite} of {n} element(s) NaN/Inf in compiled where eager and the golden "
                          f"are finite (first at element {zarg})", stats, math.inf)
    # the spread's scale relative to eager's error, measured on this tensor (lower confidence bound)
    c_used, c_hat, resolved_n = (DEFAULT_C if c is None else float(c)), None, 0
    if ratios and c is None:
        r = torch.cat(ratios).sort().values
        resolved_n = r.numel()
        if resolved_n >= MIN_CALIBRATION:
            med = median_max_ratio(runs - 1 if split else runs)
            c_hat = float(r[resolved_n // 2]) / med
            zq = NormalDist().inv_cdf(1 - CALIBRATION_CONFIDENCE)  # the order statistic below the median
            lo = max(0, int(math.floor(resolved_n / 2 - zq * math.sqrt(resolved_n) / 2)))
            c_used = min(float(r[lo]) / med, MAX_C)
    stats.update(c=c_used, c_hat=c_hat, calibrated_on=resolved_n,
                 calibrated_by="first run / other runs" if split else "eager's error")
    p0 = list(_ladder_tail(tuple(ladder), runs, float(ratio), _c_grid(c_used)))
    level = alpha / len(ladder)
    margin, fail_j, best_p = 0.0, None, 1.0
    rungs = []
    for j, (t, k, p) in enumerate(zip(ladder, counts.tolist(), p0)):
        limit = smallest_failing_count(n, p, level)
        share = k / (limit - 0.5)
        if k:
            rungs.append({"T": t, "count": k, "expected": n * p, "limit": limit - 1})
        if share > margin:
            margin = share
        if k >= limit:
            pv = binom_sf(k, n, p)
            if fail_j is None or pv < best_p:
                fail_j, best_p = j, pv
    stats.update(rungs=rungs, margin=margin)
    if fail_j is None:
        return BandResult(True, f"within eager's noise band (largest z {zmax:.3g}, margin {margin:.3g}; "
                          f"c {c_used:.3g})",
                          stats, margin)
    t, k = ladder[fail_j], int(counts[fail_j])
    limit = smallest_failing_count(n, p0[fail_j], level) - 1
    stats["failed_rung"] = {"T": t, "count": k, "expected": n * p0[fail_j], "limit": limit, "p": best_p}
    ce, ee, gg, bb = worst
    msg = (f"{k} of {n} element(s) beyond {t:.3g}x their noise band (max(|eager - golden|, spread of {runs} "
           f"randomised-rounding run(s), u|golden|)); a correct computation up to {ratio:g}x eager's noise "
           f"puts {n * p0[fail_j]:.3g} there on average and at most {limit} at alpha {alpha:g} "
           f"(P = {best_p:.2g}); largest z {zmax:.3g} at element {zarg} (compiled {ce:.4g}, eager {ee:.4g}, "
           f"golden {gg:.4g}, band {bb:.3g})")
    return BandResult(False, msg, stats, margin)


# --- the band as eager's error in the existing per-octave MaxRel and small-value MaxAbs -----------------

BAND_KEYS = ("octave_max_abs.", "small_value_max_abs")


def band_surrogate(eager: torch.Tensor, golden: torch.Tensor, spread: torch.Tensor | None, *,
                   dtype: torch.dtype | None = None, abs_floor: float | None = None,
                   eager_golden: torch.Tensor | None = None) -> torch.Tensor:
    """golden + sign(eager - golden) x band, in fp64: an "eager" whose error at every element is its noise
    band (module docstring) instead of the one draw eager happened to make. Fed to the existing per-octave
    MaxRel (`octave_reference`), it keeps that rule's population evidence (an octave where eager and its
    perturbed runs are all within an ulp is accurate, so a few elements 10% off there still fail) while an
    octave where eager was merely lucky is judged against the spread of its noise."""
    dtype = dtype or eager.dtype
    e, g = eager.double(), golden.double()
    err = (e - g).abs()
    if eager_golden is not None:
        err = torch.maximum(err, (e - eager_golden.double()).abs())
    floor = float(abs_floor) if abs_floor is not None else torch.finfo(dtype).tiny
    band = torch.maximum(err, g.abs() * unit_roundoff(dtype)).clamp_min(floor)
    if spread is not None:
        band = torch.maximum(band, spread.double().nan_to_num(0.0))
    sign = torch.where(e >= g, 1.0, -1.0).to(torch.float64)
    return torch.where(torch.isfinite(e) & torch.isfinite(g), g + sign * band, e)


def octave_reference(reference_vs_golden, eager: torch.Tensor, golden: torch.Tensor,
                     spread: torch.Tensor | None, *, applied, dtype: torch.dtype | None = None,
                     eager_golden: torch.Tensor | None = None):
    """`reference_vs_golden` (eager's Metrics against the golden) with its per-octave largest errors and its
    small-value MaxAbs raised to those of the band (`band_surrogate`); every other metric (RMSE, MeanRel, the
    small-value count) stays eager's own. `applied`: the row's `Comparison.applied` (thresholds at its
    scale). Pass the result as `compare(..., reference_vs_golden=...)`. Same pattern as rows.py's
    `_octaves_of_both`."""
    from fusecheck.compare.metrics import Metrics, pair_metrics
    dtype = dtype or eager.dtype
    surrogate = band_surrogate(eager, golden, spread, dtype=dtype, eager_golden=eager_golden)
    banded = pair_metrics(surrogate, golden.double(), ulp_dtype=dtype, rtol=applied.tolerance.rtol,
                          atol=applied.tolerance.atol, small_threshold=applied.small_threshold)
    values = dict(reference_vs_golden.values)
    for k, v in banded.values.items():
        if k.startswith(BAND_KEYS):
            values[k] = max(values.get(k, 0.0), v)
    return Metrics(values)
