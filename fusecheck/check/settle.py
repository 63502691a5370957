"""Settling the rows the golden checks failed, against eager's family and eager's per-element noise band.

Why: every golden check holds compiled to a ratio of eager's error, and eager's error is one draw. A row
those checks failed is not a verdict yet: eager is run a few more times under randomised rounding
(fusecheck/compare/noise_band.py), which gives
1. eager's family (fusecheck/compare/family.py): the aggregate checks (RMSE, mean relative error,
   small-value counts) are judged again against the median of eager and K eager-like runs, so a lucky draw
   of eager (a few elements, an exact cancellation, a few amplified roundings) does not fail a correct
   compile; where eager has no significant digit at all, the row is judged on RMSE alone;
2. each element's noise band: a row only the per-element (max-type) checks still fail is judged element by
   element, and fails only when compiled is beyond the band on more elements than chance allows (whether
   eager is accurate at an element depends on how it was computed, not on its value).
Rows no check doubted cost nothing: the extra eager runs happen only when some row is in doubt, and only its
results are kept.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable

from fusecheck.compare import Comparison, Status, Verdict, compare
from fusecheck.compare.family import Family, family_of, judge_without_digits
from fusecheck.compare.noise_band import Spread, judge_band
from fusecheck.check.digits import digit_mask, restrict
from fusecheck.check.rows import Doubt, RowJudge, per_element_only

NOISE_BAND_RUNS = 8  # K randomised-rounding eager runs: the band is the max of K + 1 draws per element; K = 8
# keeps a lone bf16 element at twice its value caught (K = 4 needs eight such elements; noise_band.py)
# A row the band clears near its limit (margin >= ESCALATE_MARGIN: a count within a factor 4 of failing) is judged
# again with ESCALATE_RUNS more runs: the null tail falls as (r / T)^(K + 1), so at K = 32 a lone element ~10x
# beyond its band (one bf16 element 10% off where eager's noise is ~1%) is significant where at K = 8 it is not.
# Two tests at alpha each: the false-alarm rate stays <= 2 alpha. Only while the extra runs are cheap (their
# estimated time at most ESCALATE_SECONDS, from the first K runs), else the report says it was not done.
ESCALATE_RUNS = 24
ESCALATE_MARGIN = 0.25
ESCALATE_SECONDS = 60.0

OUTCOMES = {  # how a doubted row ended, as the report's note counts them
    "family": "not worse than eager's family",
    "no_digits": "without a significant digit in eager, not worse on RMSE",
    "band": "within each element's noise band",
    "digits": "not worse where eager has a significant digit, and on RMSE where it has none",
    "failed": "still worse",
}


def settle(judge: RowJudge, measure: Callable[[Iterable[str], int, int], Spread]) -> list[str]:
    """Re-judge `judge.doubtful` rows against eager's family and noise band; `measure(names, runs, first_run)`
    runs that many perturbed eager runs from that seed index (keeping each run's difference: `Spread.diffs`).
    Returns the report's notes; the doubts are consumed."""
    if not judge.doubtful:
        return []
    spread = measure(sorted(judge.doubtful), NOISE_BAND_RUNS, 0)
    doubted = {name: (row, doubt, row.verdict) for name, doubt in judge.doubtful.items()
               if (row := judge.rows.get(name)) is not None}
    outcome = {name: _settle_row(row, doubt, spread, judge, name) for name, (row, doubt, _) in doubted.items()}
    notes = _escalate(doubted, outcome, spread, judge, measure)
    for name, (row, _, _) in doubted.items():
        if outcome[name] != "failed" and name in judge.compiled_noisy:
            row.notes.append("compiled output changed between two runs with the same inputs; both runs are judged "
                             "against the golden and neither is worse than eager")
    judge.doubtful.clear()  # the eager, golden and compiled tensors they held are released here
    outcomes = Counter(outcome.values())
    counts = ", ".join(f"{outcomes[k]} {text}" for k, text in OUTCOMES.items() if outcomes[k])
    notes.insert(0, f"settling: {len(doubted)} row(s) failed by the golden checks against eager's one run were "
                    f"judged again against {spread.runs} randomised-rounding eager runs: {counts}")
    return notes + list(spread.notes)


def _escalate(doubted: dict, outcome: dict[str, str], spread: Spread, judge: RowJudge, measure) -> list[str]:
    """Rows the noise band cleared near its limit, settled again with ESCALATE_RUNS more runs (updates
    `outcome`); the note says what was done or why not."""
    close = sorted(name for name, (row, _, _) in doubted.items()
                   if outcome[name] == "band" and row.verdict.margins.get("noise_band", 0.0) >= ESCALATE_MARGIN)
    if not close:
        return []
    cost = spread.seconds.get("perturbed", 0.0) * ESCALATE_RUNS / max(spread.runs, 1)
    if cost > ESCALATE_SECONDS:
        return [f"{len(close)} row(s) within the noise band near its limit were not judged again with "
                f"{ESCALATE_RUNS} more randomised runs (about {cost:.0f} s)"]
    merged = spread.merged(measure(close, ESCALATE_RUNS, spread.runs))
    for name in close:
        row, doubt, before = doubted[name]
        row.verdict = before
        outcome[name] = _settle_row(row, doubt, merged, judge, name)
    failed = sum(outcome[name] == "failed" for name in close)
    return [f"{len(close)} row(s) within the noise band near its limit were judged again against {merged.runs} "
            f"randomised-rounding eager runs: {failed} beyond it"]


def _settle_row(row: Comparison, doubt: Doubt, spread: Spread, judge: RowJudge, name: str) -> str:
    before = row.verdict
    outcome = _settle_whole(row, doubt, spread, judge, name)
    if outcome == "failed":  # last: are the checks that still fail decided by elements without a digit?
        mask = digit_mask(doubt, spread.get(name))
        if mask is not None:
            row.verdict = before
            outcome = _split(row, doubt, spread, judge, name, mask)
    return outcome


def _settle_whole(row: Comparison, doubt: Doubt, spread: Spread, judge: RowJudge, name: str) -> str:
    policy = judge.policy
    base = row.reference_vs_golden or compare(doubt.eager, doubt.eager, doubt.golden, policy=policy,
                                              name=name).vs_golden
    family = family_of(base, doubt.golden, spread.diffs.get(name, []), policy, doubt.eager.dtype, name)
    flagged = "; ".join(f for _, _, v in doubt.runs for f in v.failed_checks)
    if not family.significant:
        judged = [(call, judge_without_digits(result, doubt.golden, family, policy, name))
                  for call, result, _ in doubt.runs]
        failing = [(call, v) for call, v in judged if not v.passed]
        if failing:
            _still_failing(row, failing[0][0], failing[0][1].message, failing[0][1].margins)
            return "failed"
        row.verdict = Verdict(Status.PASS, "not_worse_than_eager", f"the golden checks flagged {flagged}, but "
                              + judged[0][1].message, margins={**row.verdict.margins, **judged[0][1].margins})
        return "no_digits"
    rejudged = [(call, result, compare(result, doubt.eager, doubt.golden, policy=policy, name=name,
                                       reference_vs_golden=family.metrics).verdict)
                for call, result, _ in doubt.runs]
    remaining = [(call, result, v) for call, result, v in rejudged if not v.passed]
    if not remaining:
        calls = " and ".join(call for call, _, _ in rejudged)
        row.verdict = Verdict(Status.PASS, "not_worse_than_eager",
                              f"the golden checks flagged {flagged} against eager's one run, but against eager's "
                              f"family ({_family_text(family)}) compiled ({calls} call) is not worse",
                              margins=rejudged[0][2].margins)
        return "family"
    if all(per_element_only(v) for _, _, v in remaining):
        return _band(row, doubt, remaining, spread, judge, name, flagged)
    call, _, v = remaining[0]
    _still_failing(row, call, f"against eager's family ({_family_text(family)}) too: {v.message}", v.margins)
    return "failed"


def _split(row: Comparison, doubt: Doubt, spread: Spread, judge: RowJudge, name: str, mask) -> str:
    """Some elements have a significant digit in eager and some none (digits.py): the first are settled as
    any row is (family, then band), the others judged on RMSE alone against the family's largest."""
    policy = judge.policy
    flagged = "; ".join(f for _, _, v in doubt.runs for f in v.failed_checks)
    n_with, n_without = int(mask.sum()), int((~mask).sum())
    with_digit, s_with = restrict(doubt, spread, name, mask)
    with_digit.runs = [(call, r, compare(r, with_digit.eager, with_digit.golden, policy=policy, name=name).verdict)
                       for call, r, _ in with_digit.runs]
    part = compare(with_digit.runs[0][1], with_digit.eager, with_digit.golden, policy=policy, name=name)
    failing = [(call, v) for call, _, v in with_digit.runs if not v.passed]
    if failing:
        part.verdict = failing[0][1]
        if _settle_whole(part, with_digit, s_with, judge, name) == "failed":
            _still_failing(row, failing[0][0], f"on the {n_with} element(s) where eager has a significant "
                           f"digit: {part.verdict.message}", part.verdict.margins)
            return "failed"
    without, s_without = restrict(doubt, spread, name, ~mask)
    base = compare(without.eager, without.eager, without.golden, policy=policy, name=name).vs_golden
    family = family_of(base, without.golden, s_without.diffs.get(name, []), policy, doubt.eager.dtype, name)
    judged = [(call, judge_without_digits(r, without.golden, family, policy, name)) for call, r, _ in without.runs]
    bad = [(call, v) for call, v in judged if not v.passed]
    if bad:
        _still_failing(row, bad[0][0], f"on the {n_without} element(s) where eager has no significant digit "
                       f"(its noise reaches |golden|): {bad[0][1].message}", bad[0][1].margins)
        return "failed"
    row.verdict = Verdict(Status.PASS, "not_worse_than_eager",
                          f"the golden checks flagged {flagged}, but eager has no significant digit at "
                          f"{n_without} of {n_with + n_without} elements (its noise, its error or the largest "
                          f"move of {spread.runs} randomised-rounding eager runs, reaches |golden|): on the "
                          f"{n_with} others compiled is not worse than eager ({part.verdict.message}); on these, "
                          f"{judged[0][1].message}",
                          margins={**part.verdict.margins, **judged[0][1].margins})
    return "digits"


def _family_text(family: Family) -> str:
    return (f"eager and {family.runs} randomised-rounding eager runs, per metric the median; "
            f"RMSE {family.rmse[0]:.3g} for eager, typical {family.typical_rmse:.3g}")


def _still_failing(row: Comparison, call: str, why: str, margins: dict) -> None:
    """The row's verdict, with why it still fails and the margins that say so (a part of the row settled on
    its own, `_split`, already names its call and prefixes its margins: neither is repeated)."""
    v = row.verdict
    where = "" if why.endswith("compiled call)") else f" ({call} compiled call)"
    settled = {k if k.startswith("settled.") else f"settled.{k}": m for k, m in margins.items()}
    row.verdict = Verdict(v.status, v.code, f"{v.message}; and {why}{where}", v.failed_checks,
                          {**v.margins, **settled})


def _band(row: Comparison, doubt: Doubt, remaining, spread: Spread, judge: RowJudge, name: str,
          flagged: str) -> str:
    """Only the per-element checks still fail: each element against its own noise band."""
    ratios = judge.policy.ratios
    bands = [(call, judge_band(result, doubt.eager, doubt.golden, spread.get(name), runs=spread.runs,
                               calibration=spread.calibration(name), ratio=ratios.rmse,
                               alpha=ratios.max_rel_alpha))
             for call, result, _ in remaining]
    margin = max(b.margin for _, b in bands)
    margins = {**row.verdict.margins, "noise_band": margin}
    failing = [(call, b) for call, b in bands if not b.passed]
    if failing:
        call, band = failing[0]
        v = row.verdict
        row.verdict = Verdict(v.status, v.code, f"{v.message}; and beyond eager's noise band ({call} "
                              f"compiled call): {band.message}", v.failed_checks, margins)
        return "failed"
    calls = " and ".join(call for call, _ in bands)
    row.verdict = Verdict(Status.PASS, "not_worse_than_eager",
                          f"the golden checks flagged {flagged} against eager's one run; against eager's family "
                          f"only the per-element checks still failed, and compiled ({calls} call) is within each "
                          f"element's noise band, measured from {spread.runs} randomised-rounding eager runs: "
                          f"{bands[0][1].message}", margins=margins)
    return "band"
