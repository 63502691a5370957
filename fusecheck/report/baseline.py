"""Baselines for the merge gate: known failures recorded once, so CI fails only on new ones.

`fusecheck check ... --json base.json` writes a baseline; `--baseline base.json` later marks rows that
failed in it as known (reported, not gating) and rows that failed before but pass now as fixed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class BaselineDiff:
    new_failures: list[str] = field(default_factory=list)
    known_failures: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)

    @property
    def gate_passes(self) -> bool:
        return not self.new_failures

    def lines(self) -> list[str]:
        out = [f"baseline: new failure {n}" for n in self.new_failures]
        out += [f"baseline: known failure {n} (accepted by the baseline)" for n in self.known_failures]
        out += [f"baseline: fixed {n} (update the baseline)" for n in self.fixed]
        return out


def _key(case: str, dtype: str, train: bool, name: str) -> str:
    return f"{case}/{dtype}/{'train' if train else 'fwd'}/{name}"


def load_baseline(path: str | Path) -> dict[str, str]:
    """Map row key -> status from a report JSON written by --json."""
    data = json.loads(Path(path).read_text())
    reports = data if isinstance(data, list) else [data]
    return {_key(r["case"], r["dtype"], r["train"], row["name"]): row["verdict"]["status"]
            for r in reports for row in r["rows"]}


def diff_against(report, baseline: dict[str, str]) -> BaselineDiff:
    diff = BaselineDiff()
    for row in report.rows:
        key = _key(report.case, report.dtype, report.train, row.name)
        before = baseline.get(key)
        if not row.passed:
            (diff.known_failures if before not in (None, "PASS") and before == row.verdict.status.value
             else diff.new_failures).append(key)
        elif before not in (None, "PASS"):
            diff.fixed.append(key)
    return diff
