"""Failure rate of repeated runs with a confidence bound (Wilson score interval, 95 %, two-sided).

Wilson rather than the normal approximation because races are rare: with 0 failures in n runs the
normal interval collapses to [0, 0], while Wilson's upper bound is about 3.84/(n+3.84).
"""
from __future__ import annotations

import math

Z95 = 1.959963984540054


def wilson_interval(failures: int, runs: int, z: float = Z95) -> tuple[float, float]:
    if runs <= 0:
        return 0.0, 1.0
    p = failures / runs
    den = 1 + z * z / runs
    centre = (p + z * z / (2 * runs)) / den
    half = z * math.sqrt(p * (1 - p) / runs + z * z / (4 * runs * runs)) / den
    lo = 0.0 if failures == 0 else max(0.0, centre - half)
    hi = 1.0 if failures == runs else min(1.0, centre + half)
    return lo, hi


def rate_summary(failures: int, runs: int) -> dict:
    lo, hi = wilson_interval(failures, runs)
    return {"runs": runs, "failures": failures, "rate": failures / runs if runs else None,
            "ci95_low": lo, "ci95_high": hi, "bound": "Wilson score, 95% two-sided"}
