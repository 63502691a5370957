"""Failure rates of repeated runs, with a Wilson 95 % bound: the one place op, check (and dist) do this math.

Why Wilson: races are rare, and with 0 failures in n runs the normal interval collapses to [0, 0]; Wilson's
upper bound is z^2 / (n + z^2) (about 3.84 / (n + 3.84)), so 73 clean runs bound a rate below 5 % and 10 only
below ~28 %. A rate is only meaningful with its unit: how many kernel calls (and ranks) make one run, so that
a per-call probability can be backed out, 1 - (1 - r)^(1 / calls). No torch here: `-h` stays fast.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.959963984540054
BOUND_NAME = "Wilson score, 95% two-sided"
# the rate a PASS is held to when none was requested: the motivating race (a fused linear + online softmax
# failing 5-10 % of calls) must not hide behind a clean but short run
DEFAULT_REQUESTED_RATE = 0.05


def wilson_interval(failures: int, runs: int, z: float = Z95) -> tuple[float, float]:
    """(low, high) of the two-sided Wilson score interval; (0, 1) when there are no runs."""
    if runs <= 0:
        return 0.0, 1.0
    p = failures / runs
    den = 1 + z * z / runs
    centre = (p + z * z / (2 * runs)) / den
    half = z * math.sqrt(p * (1 - p) / runs + z * z / (4 * runs * runs)) / den
    lo = 0.0 if failures == 0 else max(0.0, centre - half)
    hi = 1.0 if failures == runs else min(1.0, centre + half)
    return lo, hi


def runs_for_bound(rate: float, z: float = Z95) -> int:
    """The fewest runs whose clean pass (0 failures) puts the Wilson upper bound below `rate` (0.05 -> 73)."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"a rate bound must lie strictly between 0 and 1, not {rate}")
    n = max(1, math.floor(z * z * (1.0 - rate) / rate))  # z^2 / (n + z^2) < rate  <=>  n > z^2 (1 - rate) / rate
    while wilson_interval(0, n, z)[1] >= rate:
        n += 1
    return n


def per_call(rate: float, calls: int) -> float:
    """The per-call probability that gives run failure rate `rate` when a run is `calls` independent calls."""
    if calls <= 1 or rate in (0.0, 1.0):
        return rate
    return 1.0 - (1.0 - rate) ** (1.0 / calls)


@dataclass(frozen=True)
class Rate:
    """`failures` of `runs` runs, each made of `calls` kernel calls (times `ranks` ranks, for dist)."""

    failures: int
    runs: int
    calls: int = 1
    ranks: int = 1

    @property
    def rate(self) -> float | None:
        return self.failures / self.runs if self.runs else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.failures, self.runs)

    def excludes(self, rate: float) -> bool:
        """Does the bound rule out a run failure rate of `rate` (its upper end lies below it)?"""
        return self.interval[1] < rate

    def to_dict(self) -> dict:
        lo, hi = self.interval
        return {"runs": self.runs, "failures": self.failures, "rate": self.rate, "ci95_low": lo, "ci95_high": hi,
                "bound": BOUND_NAME, "calls_per_run": self.calls, "ranks": self.ranks,
                "per_call_ci95_high": per_call(hi, self.calls * self.ranks)}

    def text(self) -> str:
        """`3/100 runs failed: 3.0% (95% 1.03-8.45%)`, or for a clean run `0/73 runs failed: rate < 4.999%`."""
        lo, hi = self.interval
        if self.failures == 0:
            return f"0/{self.runs} runs failed: rate < {hi:.3%} (Wilson 95%)"
        return f"{self.failures}/{self.runs} runs failed: {self.rate:.1%} (Wilson 95% {lo:.2%}-{hi:.2%})"


def pct(x: float) -> str:
    """0.05 -> '5%', 0.0025 -> '0.25%'."""
    return f"{x * 100:.3g}%"


def unit_text(calls: int, what: str, ranks: int = 1) -> str:
    """The unit a rate is counted in, said once in every report that gives a rate."""
    on = f" on each of {ranks} ranks" if ranks > 1 else ""
    return f"1 run = {calls} call{'s' if calls != 1 else ''} of {what}{on}"


def verdict_line(overall: Rate, requested: float | None, *, passed: bool) -> str:
    """What a clean pass proves about the rate, and whether that excludes the requested one; what a failure
    measured. `requested` None: the default rate a PASS is held to (DEFAULT_REQUESTED_RATE)."""
    target = DEFAULT_REQUESTED_RATE if requested is None else requested
    lo, hi = overall.interval
    calls = overall.calls * overall.ranks
    per = f"; per call < {per_call(hi, calls):.3%}" if calls > 1 else ""
    if not passed or overall.failures:
        return f"failure rate: {overall.text()}{per}"
    if overall.excludes(target):
        return f"failure rate: {overall.text()}{per}; this excludes a {pct(target)} failure rate per run"
    return (f"failure rate: {overall.text()}{per}; this PASS cannot exclude a {pct(target)} failure rate per run: "
            f"--rate-bound {target:g} runs {runs_for_bound(target)} times")
