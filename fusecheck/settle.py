"""Settling the rows only the per-element checks failed, with eager's own per-element noise band.

Why: the per-element (max-type) checks exist to catch a few wrong elements where eager is accurate, and
whether eager is accurate at an element depends on how the element was computed, not on its value (a
qkv-bias gradient is a sum whose terms cancel: its error is set by the terms, not by the result). So a row
those checks alone failed is not a verdict yet: eager is run a few more times under randomised rounding
(fusecheck/compare/noise_band.py), which gives each element its noise band, and the row fails only when
compiled is beyond that band on more elements than chance allows. Rows no check doubted cost nothing: the
extra eager runs happen only when some row is in doubt, and only its results are kept.
"""
from __future__ import annotations

from typing import Callable, Iterable

from fusecheck.compare import Status, Verdict
from fusecheck.compare.noise_band import Spread, judge_band
from fusecheck.rows import RowJudge

NOISE_BAND_RUNS = 8  # K randomised-rounding eager runs: the band is the max of K + 1 draws per element; K = 8
# keeps a lone bf16 element at twice its value caught (K = 4 needs eight such elements; noise_band.py)


def settle(judge: RowJudge, measure: Callable[[Iterable[str]], Spread]) -> list[str]:
    """Re-judge `judge.doubtful` rows against eager's noise band; `measure(names)` runs the perturbed eager
    runs. Returns the report's notes; the doubts are consumed."""
    if not judge.doubtful:
        return []
    spread = measure(sorted(judge.doubtful))
    rescued = 0
    ratios = judge.policy.ratios
    for name, doubt in judge.doubtful.items():
        row = judge.rows.get(name)
        if row is None:
            continue
        bands = [(call, judge_band(result, doubt.eager, doubt.golden, spread.get(name), runs=spread.runs,
                                   calibration=spread.calibration(name), ratio=ratios.rmse,
                                   alpha=ratios.max_rel_alpha))
                 for call, result, _ in doubt.runs]
        margin = max(b.margin for _, b in bands)
        flagged = "; ".join(f for _, _, v in doubt.runs for f in v.failed_checks)
        failing = [(call, b) for call, b in bands if not b.passed]
        margins = {**row.verdict.margins, "noise_band": margin}
        if failing:
            call, band = failing[0]
            v = row.verdict
            row.verdict = Verdict(v.status, v.code, f"{v.message}; and beyond eager's noise band ({call} "
                                  f"compiled call): {band.message}", v.failed_checks, margins)
            continue
        rescued += 1
        calls = " and ".join(call for call, _ in bands)
        row.verdict = Verdict(Status.PASS, "not_worse_than_eager",
                              f"the per-element checks flagged {flagged}, but compiled ({calls} call) is within "
                              f"each element's noise band, measured from {spread.runs} randomised-rounding eager "
                              f"runs: {bands[0][1].message}", margins=margins)
        if name in judge.compiled_noisy:
            row.notes.append("compiled output changed between two runs with the same inputs; both runs are judged "
                             "against the golden and neither is worse than eager")
    doubted = len(judge.doubtful)
    judge.doubtful.clear()  # the eager, golden and compiled tensors they held are released here
    notes = [f"noise band: {doubted} row(s) failed only by the per-element checks were judged "
             f"against eager's per-element noise band ({spread.runs} randomised-rounding eager runs); "
             f"{rescued} within it"]
    return notes + list(spread.notes)
