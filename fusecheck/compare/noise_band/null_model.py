"""The null model of the band: how often a correct compiled result (up to `ratio` times noisier than eager)
lands beyond T times the band on an element, and the binomial tail that turns counts into a verdict."""
from __future__ import annotations

import functools
import math

import torch


# --- the null model ---------------------------------------------------------------------------------------

DEFAULT_C = 1.0           # spread scale / eager's error scale when a tensor cannot calibrate it (conservative)
MAX_C = math.sqrt(3.0)    # the largest ratio the perturbation model predicts (stochastic vs nearest rounding)
MIN_CALIBRATION = 32      # resolved elements needed to measure c on a tensor
CALIBRATION_CONFIDENCE = 1e-3
LADDER = tuple(2.0 * 2.0 ** (j / 2) for j in range(59))  # 2 .. 2^30, a factor sqrt(2) apart


@functools.lru_cache(maxsize=1)
def _x_grid(steps: int = 1200) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-spaced x in (1e-12, 40) with the trapezoid weights of dx."""
    s = torch.linspace(math.log(1e-12), math.log(40.0), steps + 1, dtype=torch.float64)
    x = s.exp()
    w = x * float(s[1] - s[0])
    w[0] = w[-1] = w[0] / 2
    return x, w


def null_tail(thresholds, *, runs: int, ratio: float = 2.0, c: float = DEFAULT_C) -> torch.Tensor:
    """p0(T) = P(ratio |N| > T max(|N_0|, c |N_1|, ..., c |N_runs|)), all independent standard normals: the
    chance that a correct computation `ratio` times noisier than eager lands above T bands (module docstring)."""
    t = torch.as_tensor(thresholds, dtype=torch.float64).reshape(-1, 1)
    u, w = _x_grid()
    x = u * ratio                                     # compiled's |error|, density of ratio |N|
    dens = math.sqrt(2 / math.pi) * torch.exp(-(u * u) / 2) * w  # f(x) dx for x = ratio u, u ~ |N|
    g = torch.erf(x / (t * math.sqrt(2)))
    if runs:
        g = g * torch.erf(x / (c * t * math.sqrt(2))) ** runs
    out = (g * dens).sum(-1)
    out = torch.where(torch.isinf(t.reshape(-1)), torch.zeros_like(out), out)
    return out.clamp(0.0, 1.0)


def _c_grid(c: float) -> float:
    """c rounded down to a 1% log grid (rounding down only widens the null tail), so that rows share p0."""
    return math.exp(math.floor(math.log(c) / 0.01 + 1e-9) * 0.01) if c > 0 else 0.0


@functools.lru_cache(maxsize=4096)
def _ladder_tail(ladder: tuple[float, ...], runs: int, ratio: float, c: float) -> tuple[float, ...]:
    return tuple(null_tail(ladder, runs=runs, ratio=ratio, c=c).tolist())


@functools.lru_cache(maxsize=64)
def median_max_ratio(runs: int) -> float:
    """Median of max(|N_1..N_runs|) / |N_0|: under the model, spread/|eager error| = c times this."""
    u, w = _x_grid()
    dens = math.sqrt(2 / math.pi) * torch.exp(-u * u / 2) * w  # |N_0| = u

    def cdf(q):  # P(max_K <= q |N_0|)
        return float((torch.erf(q * u / math.sqrt(2)) ** runs * dens).sum())
    lo, hi = math.log(1e-3), math.log(1e3)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(math.exp(mid)) < 0.5 else (lo, mid)
    return math.exp((lo + hi) / 2)


def _log_binom_pmf(k: int, n: int, p: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(p) + (n - k) * math.log1p(-p))


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space from k up (only for k above the mean is it
    small, which is all the rule needs; below the mean it returns 1)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0 or k <= n * p:
        return 1.0
    log_t = _log_binom_pmf(k, n, p)
    total, i, term = 0.0, k, 1.0
    ratio = p / (1 - p)
    while i <= n:
        total += term
        term *= (n - i) / (i + 1) * ratio
        i += 1
        if term < 1e-17 * total:
            break
    return min(1.0, math.exp(log_t + math.log(total)))


def smallest_failing_count(n: int, p: float, level: float) -> int:
    """The least k with P(Binomial(n, p) >= k) < level (n + 1 when none)."""
    lo = max(1, int(n * p))
    if binom_sf(lo, n, p) < level:
        return lo
    step = max(1, int(math.sqrt(n * p)) + 1)
    hi = lo + step
    while hi <= n and binom_sf(hi, n, p) >= level:
        lo, hi = hi, hi + 2 * (hi - lo)
    hi = min(hi, n + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if binom_sf(mid, n, p) < level else (mid, hi)
    return hi
