"""The report of `fusecheck op`: check's table and legend for the rows, then the failure rates per shape.

Rows are named `<dtype>[<shape>].<output>` (probes: `<dtype>[<shape>].<probe>.<output>`), so JUnit and the
JSON keep one stable name per thing judged; with --repeat a (dtype, shape) shows its first failing run, or
its first run when none failed. The JSON has what `check --json` has for its rows (the HTML page is check's),
plus every run's outcome and the rates with their unit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fusecheck.compare import Comparison, Status
from fusecheck.policy import Policy
from fusecheck.rates import BOUND_NAME, Rate, unit_text, verdict_line
from fusecheck.report.table import _wrap, format_rows, legend, nonfinite_notes, render_table, tolerance_notes


def shape_text(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


@dataclass
class RunRecord:
    dtype: str
    shape: dict
    run: int
    seed: int
    passed: bool
    failed_rows: list[str]

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "shape": dict(self.shape), "run": self.run, "seed": self.seed,
                "passed": self.passed, "failed_rows": list(self.failed_rows)}


@dataclass
class OpReport:
    case: str
    spec: str
    dtypes: list[str]
    shapes: list[dict]
    repeat: int
    train: bool
    seed: int
    device: str
    policy: Policy
    rows: list[Comparison] = field(default_factory=list)        # per (dtype, shape): the run shown
    probe_rows: list[Comparison] = field(default_factory=list)  # first run of each (dtype, shape) only
    runs: list[RunRecord] = field(default_factory=list)
    rates: dict[str, Rate] = field(default_factory=dict)        # "<dtype>[<shape>]" -> failures of its runs
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    requested_rate: float | None = None

    @property
    def calls_per_run(self) -> int:
        return 1

    @property
    def unit(self) -> str:
        what = "fused (forward and backward)" if self.train else "fused (forward)"
        return unit_text(self.calls_per_run, what) + " on fresh inputs (seed + run index), judged in full"

    @property
    def dtype(self) -> str:  # JUnit's class name
        return "+".join(self.dtypes)

    @property
    def all_rows(self) -> list[Comparison]:
        return self.rows + self.probe_rows

    @property
    def overall(self) -> Rate:
        return Rate(sum(r.failures for r in self.rates.values()), sum(r.runs for r in self.rates.values()),
                    calls=self.calls_per_run)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.all_rows) and all(r.passed for r in self.runs)

    @property
    def exit_code(self) -> int:
        if any(r.verdict.status is Status.ERROR for r in self.all_rows):
            return 2
        return 0 if self.passed else 1

    @property
    def status(self) -> str:
        return {0: "PASS", 1: "FAIL", 2: "ERROR"}[self.exit_code]

    def rate_lines(self) -> list[str]:
        return [verdict_line(self.overall, self.requested_rate, passed=self.passed), f"unit: {self.unit}"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": "fusecheck op", "case": self.case, "spec": self.spec, "status": self.status,
            "exit_code": self.exit_code, "dtype": self.dtype, "dtypes": list(self.dtypes),
            "shapes": [dict(s) for s in self.shapes], "repeat": self.repeat, "train": self.train, "seed": self.seed,
            "device": self.device, "policy": self.policy.to_dict(), "rows": [r.to_dict() for r in self.all_rows],
            "runs": [r.to_dict() for r in self.runs],
            "rates": {"unit": self.unit, "calls_per_run": self.calls_per_run, "bound": BOUND_NAME,
                      "requested_rate": self.requested_rate,
                      "per_shape": {k: v.to_dict() for k, v in self.rates.items()},
                      "overall": self.overall.to_dict(), "summary": self.rate_lines()[0]},
            "notes": self.notes + self.rate_lines(), "seconds": dict(self.seconds),
        }


def _rate_table(report: OpReport) -> str:
    body = []
    for key, rate in report.rates.items():
        lo, hi = rate.interval
        body.append([key, rate.runs, rate.failures, f"{rate.rate:.1%}", f"{lo:.2%}-{hi:.2%}"])
    return render_table(["dtype[shape]", "runs", "failed", "rate", "Wilson 95%"], body, wrap={0: 16})


def _probe_summary(report: OpReport) -> str:
    probes = {r.name.split(".", 1)[1].rsplit(".output", 1)[0] for r in report.probe_rows}
    kinds = sorted({p.split(":", 1)[0] for p in probes})
    failed = sum(not r.passed for r in report.probe_rows)
    nonfinite = sum(r.verdict.code == "nonfinite_positions_match" or bool(
        r.vs_golden is not None and r.vs_golden.values.get("actual_nonfinite", 0)) for r in report.probe_rows if r.passed)
    return (f"probes ({', '.join(kinds) or 'none'}; the first run of each dtype and shape, forward): "
            f"{len(report.probe_rows)} rows, {failed} not passing"
            + (f"; {nonfinite} passing rows hold NaN/Inf at the golden's and eager's places, judged on their finite "
               "values" if nonfinite else "") + ("" if failed else "; -v lists them"))


def format_op_report(report: OpReport, verbose: bool = False) -> str:
    shown = report.all_rows if verbose else report.rows + [r for r in report.probe_rows if not r.passed]
    head = (f"fusecheck op: {report.case} ({report.spec})  dtypes={','.join(report.dtypes)}  "
            f"shapes={len(report.shapes)}  repeat={report.repeat}  train={report.train}  seed={report.seed}  "
            f"device={report.device}")
    lines = [*_wrap(head, ""), *_wrap("compiled = the fused op; eager = the unfused reference chain in the op dtype; "
                                       "golden = the reference in fp64", ""),
             "", format_rows(shown, verbose), *legend(shown), ""]
    if report.probe_rows:
        lines += _wrap(_probe_summary(report), "")
    for r in shown:
        if not r.passed:
            lines += _wrap(f"{r.verdict.status.value} {r.name}: {r.verdict.message}")
    judged = shown if verbose else report.rows
    lines += [x for n in nonfinite_notes(judged) + tolerance_notes(judged) for x in _wrap(f"note: {n}")]
    rows = shown
    notes: dict[str, int] = {}
    for r in rows:
        for n in r.notes:
            notes[n] = notes.get(n, 0) + 1
    lines += [x for n, k in notes.items() for x in _wrap(f"note ({k} row{'s' if k > 1 else ''}): {n}")]
    lines += ["", f"failure rate per dtype and shape (runs of {report.repeat}; probes run once, on the first run):",
              _rate_table(report)]
    lines += [x for line in report.rate_lines() for x in _wrap(line, "")]
    lines += [x for n in report.notes for x in _wrap(f"note: {n}", "")]
    lines.append(f"policy: {report.policy.to_dict()['source']}")
    lines.append(f"verdict: {report.status} (exit {report.exit_code})")
    return "\n".join(lines)
