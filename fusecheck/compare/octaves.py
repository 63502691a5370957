"""The max relative error, judged octave by octave so that one cancellation element cannot decide it.

Why: a gradient element where large contributions cancel has |golden| far below either run's absolute
noise. Its relative error is then |noise| / |golden| for any correct run: compiled's and eager's are two
draws of the same quantity, and their ratio is heavy-tailed (for Gaussian noise P(ratio > 10) = 6.3%). A
global `max_rel(compiled) <= 10 * max_rel(eager)` therefore fails benign runs at random (5 of 44 stock
Inductor runs of four real models in issue 14, each on one such element).

The rule: elements are grouped by the binary octave [2^e, 2^(e+1)) of |golden| (values of the same size,
where eager's error says what a correct run reaches). Within an octave the relative error is measured
against its lower edge, max|N - B| / 2^e (|B| varies by 2x at most there, and absolute errors that come
from a sum are identically distributed whatever |B| is, so their maxima are comparable). In an octave of n
elements, compiled's largest such error fails only when it exceeds both
  1. the policy's allowance: `ratios.max_rel` (10) x max(eager's largest there, rtol), as msprobe's MaxRel,
  2. chance: `q(n)` x max(eager's largest there, unit roundoff), where q(n) is the (1 - max_rel_alpha)
     quantile of max(n draws) / max(n draws) for half-normal errors of one common scale: what the ratio
     of two correct runs' maxima reaches by luck alone. At alpha 1e-5: q(1) = 6.4e4 (a lone element is
     one draw against one draw), q(2) = 323, q(3) = 58, q(8) = 7.5, q(64) = 2.6.
A few elements wrong where eager is accurate on values of their size (a sign flip on the small values of a
wide-range tensor) fail on their octave; one element alone in its octave fails only when it is off by more
than chance can explain (an fp32 element 10% off where eager rounds correctly is 2e6x).
"""
from __future__ import annotations

import functools
import math

import torch

from fusecheck.compare.metrics import Metrics, octave_base


@functools.lru_cache(maxsize=1)
def _grid(steps: int = 2000) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-spaced x with the half-normal cdf and density times dx (trapezoid weights included)."""
    s = torch.linspace(math.log(1e-15), math.log(12.0), steps + 1, dtype=torch.float64)
    x = s.exp()
    w = torch.full_like(x, float(s[1] - s[0]))
    w[0] = w[-1] = w[0] / 2
    density = math.sqrt(2 / math.pi) * torch.exp(-x * x / 2)
    return x, torch.erf(x / math.sqrt(2)), density * x * w


def _max_ratio_tail(n: int, t: float) -> float:
    """P(max of n |N(0,1)| > t * max of n |N(0,1)|), all draws independent (quadrature in log x)."""
    if n == 1:
        return 2 / math.pi * math.atan(1 / t)  # closed form: the ratio of two half-normals
    x, cdf, dmass = _grid()
    inner = 1 - torch.erf(t * x / math.sqrt(2)) ** n  # P(compiled's max > t x)
    return float((inner * n * cdf ** (n - 1) * dmass).sum())


MAX_EXACT_N = 64  # beyond this q(n) changes little; q(64) is used (larger than q(n), so conservative)


def chance_ratio(n: int, alpha: float) -> float:
    """(1 - alpha) quantile of the ratio of maxima of two samples of n half-normal errors of one scale.
    n is capped before the cache: every octave larger than MAX_EXACT_N shares one cached entry."""
    return _chance_ratio(max(1, min(int(n), MAX_EXACT_N)), float(alpha))


@functools.lru_cache(maxsize=None)
def _chance_ratio(n: int, alpha: float) -> float:
    if n == 1:
        return 1 / math.tan(math.pi * alpha / 2)
    lo, hi = 0.0, math.log(1e7)
    for _ in range(48):  # bisection on log t; the tail falls monotonically with t
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _max_ratio_tail(n, math.exp(mid)) > alpha else (lo, mid)
    return math.exp(hi)


@functools.lru_cache(maxsize=None)
def unit_roundoff(dtype: torch.dtype | None) -> float:
    """Half an ULP at 1 (2^-24 for fp32, 2^-9 for bf16): no correct run is held to less."""
    if dtype is None or not (dtype.is_floating_point or dtype.is_complex):
        return torch.finfo(torch.float32).eps / 2
    real = torch.empty((), dtype=dtype).real.dtype if dtype.is_complex else dtype
    return torch.finfo(real).eps / 2


def octave_label(index: int, small_threshold: float) -> str:
    e = octave_base(small_threshold) + index
    return f"|golden| in [2^{e}, 2^{e + 1})"


def octave_max_rel(result: Metrics, reference: Metrics, *, ratio: float, rtol: float, alpha: float,
                   dtype: torch.dtype | None, small_threshold: float) -> tuple[float, str | None]:
    """(largest ratio to its limit over the octaves, failure message or None). See the module docstring."""
    u = unit_roundoff(dtype)
    base = octave_base(small_threshold)
    theirs_by_octave = reference.octaves()
    worst, failure = 0.0, None
    for i, (n, ours) in result.octaves().items():
        edge = math.ldexp(1.0, base + i) if base + i > -1074 else 5e-324
        ours, theirs = ours / edge, theirs_by_octave.get(i, (n, 0.0))[1] / edge
        allowance = ratio * max(theirs, rtol)
        chance = chance_ratio(n, alpha) * max(theirs, u)
        limit = max(allowance, chance)
        share = ours / limit if limit else (0.0 if ours == 0 else math.inf)
        if share > worst:
            worst = share
            if share > 1:
                failure = (f"max_rel {ours:.3g} vs eager {theirs:.3g} (largest |error| / 2^e) on {n} element(s) "
                           f"with {octave_label(i, small_threshold)} (limit {limit:.3g}: ratio {ratio:g}, and "
                           f"{chance_ratio(n, alpha):.3g}x for chance at {n} element(s))")
    return worst, failure
