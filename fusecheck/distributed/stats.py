"""Failure rate of repeated runs with a confidence bound (Wilson score interval, 95 %, two-sided).

Wilson rather than the normal approximation because races are rare: with 0 failures in n runs the
normal interval collapses to [0, 0], while Wilson's upper bound is about 3.84/(n+3.84).
"""
from __future__ import annotations

from fusecheck.rates import Z95, wilson_interval  # one home for the rate math (fusecheck/rates.py)

__all__ = ["Z95", "wilson_interval", "rate_summary"]


def rate_summary(failures: int, runs: int) -> dict:
    lo, hi = wilson_interval(failures, runs)
    return {"runs": runs, "failures": failures, "rate": failures / runs if runs else None,
            "ci95_low": lo, "ci95_high": hi, "bound": "Wilson score, 95% two-sided"}
