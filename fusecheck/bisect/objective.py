"""The objective: one trial = one fresh compile under a set of gate plans, judged by the core checker.

`run_check` gives the verdict (compiled vs golden relative to eager); `severity` condenses it into one
number for ranking partial fixes: the worst ratio of compiled's golden error to the verdict's own limit
over all outputs and ratio checks (<= 1: within every limit). No second verdict is invented here.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from fusecheck.bisect.gates import Decision, Plan, gated
from fusecheck.check import CheckOptions, CheckReport, CompileError, run_check
from fusecheck.compare import RATIO_CHECKS


@dataclass
class Trial:
    plans: dict[str, Plan]
    report: CheckReport | None
    decisions: dict[str, list[Decision]]
    seconds: float
    error: str | None = None
    unavailable: dict[str, str] = field(default_factory=dict)
    captured: Any = None  # attribution.Captured when the trial captured its graphs

    @property
    def passed(self) -> bool:
        return self.report is not None and self.report.passed

    @property
    def severity(self) -> float:
        return math.inf if self.report is None else severity(self.report)

    @property
    def rmse(self) -> dict[str, tuple[float | None, float | None]]:
        """output -> (compiled rmse vs golden, eager rmse vs golden)."""
        if self.report is None:
            return {}
        return {r.name: (getattr(r.vs_golden, "rmse", None), getattr(r.reference_vs_golden, "rmse", None))
                for r in self.report.rows}

    def summary(self) -> dict[str, Any]:
        return {"passed": self.passed, "severity": self.severity, "error": self.error,
                "rows": {r.name: {"status": r.verdict.status.value, "code": r.verdict.code,
                                  "rmse": getattr(r.vs_golden, "rmse", None),
                                  "eager_rmse": getattr(r.reference_vs_golden, "rmse", None),
                                  "error_ratio": r.error_ratio} for r in (self.report.rows if self.report else [])}}


def row_severity(row: Any, policy: Any) -> float:
    if row.passed:
        return min(1.0, _ratio_severity(row, policy)) if row.vs_golden is not None else 0.0
    if row.vs_golden is None or row.reference_vs_golden is None or row.verdict.code != "worse_than_eager":
        return math.inf
    return _ratio_severity(row, policy)


def _ratio_severity(row: Any, policy: Any) -> float:
    if row.vs_golden is None or row.reference_vs_golden is None:
        return 0.0
    tol = policy.tolerance(getattr(torch, row.dtype))
    worst = 0.0
    for check in RATIO_CHECKS.values():
        ours = getattr(row.vs_golden, check.metric)
        bound = _allowed(check, policy, row) * max(getattr(row.reference_vs_golden, check.metric),
                                                 check.floor(tol, row.reference_vs_golden))
        worst = max(worst, ours / bound if bound else (0.0 if ours == 0 else math.inf))
    return worst


def _allowed(check: Any, policy: Any, row: Any) -> float:
    """The check's allowed factor; the core's RatioCheck.ratio took (ratios) and now takes (ratios, numel)."""
    if len(inspect.signature(check.ratio).parameters) >= 2:
        return check.ratio(policy.ratios, row.vs_golden.numel)
    return check.ratio(policy.ratios)


def severity(report: CheckReport) -> float:
    return max((row_severity(r, report.policy) for r in report.rows), default=0.0)


def run_trial(case: Any, opts: CheckOptions, plans: dict[str, Plan], *, kinds: list[str] | None = None,
              capture: bool = False) -> Trial:
    """Compile and check `case` once (the check's own pipeline, `opts` as given: golden, blocks, precision)
    with the gates of the decision families `kinds` (default: all) set to `plans`; caches off so the gates
    really act. `capture` keeps the post-grad graphs and their inputs for per-kernel attribution."""
    from fusecheck.backends import resolve_backend
    from fusecheck.bisect.attribution import capturing

    if opts.toggles and not resolve_backend(opts.backend).is_inductor:  # `bisect --toggle`: toggles need Inductor
        return Trial(plans, None, {}, 0.0, f"not run: this probe compiles without Inductor, and the toggles "
                     f"{', '.join(opts.toggles)} act on Inductor")
    t = time.perf_counter()
    unavailable: dict[str, str] = {}
    report, error = None, None
    with warnings.catch_warnings(), torch._inductor.config.patch(force_disable_caches=True), \
            gated(plans, kinds, unavailable) as log, \
            (capturing() if capture else contextlib.nullcontext()) as captured:
        warnings.filterwarnings("ignore", message=".*force_disable_caches.*")
        try:
            report = run_check(case, opts)
        except CompileError as exc:
            error = str(exc)
    return Trial(plans, report, dict(log.decisions), time.perf_counter() - t, error, unavailable, captured)
