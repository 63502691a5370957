"""`check --repeat N` / `--rate-bound P`: the whole check run N times, every run judged, with a failure rate.

A wrapper around the check's entry point, not a loop inside it: run i is the ordinary check with seed + i
(fresh weights, inputs and cotangents), so each is judged exactly as a single check is. The report shown is
the first run that failed (else the first run), with the rate of all runs, its Wilson bound and its unit
added: one check calls the compiled model twice (both calls judged), so a per-call probability is backed out
from the run rate with calls = 2.
"""
from __future__ import annotations

import argparse
from typing import Any, Callable

from fusecheck.rates import BOUND_NAME, Rate, unit_text, verdict_line

CALLS_PER_CHECK = 2  # run_check calls the compiled model twice and judges both results


class RepeatedCheck:
    """The shown run's report (every attribute falls through to it) plus the runs' rate."""

    def __init__(self, shown, rate: Rate, statuses: list[str], unit: str, requested: float | None, how: str | None):
        self.shown, self.rate, self.statuses, self.unit = shown, rate, statuses, unit
        self.requested, self.how = requested, how

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shown, name)

    @property
    def rate_lines(self) -> list[str]:
        lines = [verdict_line(self.rate, self.requested, passed=self.rate.failures == 0), f"unit: {self.unit}"]
        return lines + ([self.how] if self.how else [])

    def to_dict(self) -> dict[str, Any]:
        data = self.shown.to_dict()
        data["repeats"] = {"runs": self.rate.runs, "failures": self.rate.failures, "statuses": list(self.statuses),
                           "unit": self.unit, "calls_per_run": self.rate.calls, "bound": BOUND_NAME,
                           "requested_rate": self.requested, "overall": self.rate.to_dict(),
                           "summary": self.rate_lines[0]}
        return data


def run_repeats(args: argparse.Namespace, check_once: Callable[[int], Any], default: int = 1):
    """The command line's way in: `check_once(seed)` once (no --repeat/--rate-bound: the plain report,
    unchanged), or as often as --repeat / --rate-bound ask."""
    if getattr(args, "repeat", None) is None and getattr(args, "rate_bound", None) is None:
        return check_once(args.seed)
    return repeat_check(check_once, repeat=args.repeat, rate_bound=args.rate_bound, seed=args.seed,
                        train=getattr(args, "train", False), default=default)


def repeat_check(check_once: Callable[[int], Any], *, repeat: int | None = None, rate_bound: float | None = None,
                 seed: int = 0, train: bool = False, default: int = 1) -> RepeatedCheck:
    """`check_once(seed + i)` for i < N (N: `repeat`, raised to what `rate_bound` needs), every run judged."""
    from fusecheck.cli.repeats import repeats
    n, how = repeats(argparse.Namespace(repeat=repeat, rate_bound=rate_bound), default)
    shown, failures, statuses = None, 0, []
    for i in range(n):
        report = check_once(seed + i)
        statuses.append(report.status)
        failures += not report.passed
        if shown is None or (not report.passed and shown.passed):
            if i:
                report.notes.append(f"shown: run {i} of {n} (seed {seed + i}), the first that failed")
            shown = report
    what = "the compiled model (" + ("forward and backward" if train else "forward") + ")"
    unit = unit_text(CALLS_PER_CHECK, what) + ", each judged; run i is the check with seed + i"
    result = RepeatedCheck(shown, Rate(failures, n, calls=CALLS_PER_CHECK), statuses, unit, rate_bound, how)
    shown.notes.extend(result.rate_lines)
    return result
