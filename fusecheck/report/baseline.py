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


def _key(report: dict, name: str) -> str:
    """A row is the same row only under the same case, backend, device, dtype, mode and toggles."""
    toggles = ",".join(sorted(report.get("toggles") or [])) or "-"
    return (f"{report['case']}/{report['backend']}/{report['device']}/{report['dtype']}/"
            f"{'train' if report['train'] else 'fwd'}/{toggles}/{name}")


def load_baseline(path: str | Path) -> dict[str, str]:
    """Map row key -> 'STATUS code' from a report JSON written by --json."""
    data = json.loads(Path(path).read_text())
    reports = data if isinstance(data, list) else [data]
    return {_key(r, row["name"]): f"{row['verdict']['status']} {row['verdict']['code']}"
            for r in reports for row in r["rows"]}


def diff_against(report, baseline: dict[str, str]) -> BaselineDiff:
    diff = BaselineDiff()
    header = {"case": report.case, "backend": report.backend, "device": report.device, "dtype": report.dtype,
              "train": report.train, "toggles": list(report.toggles)}
    for row in report.rows:
        key = _key(header, row.name)
        before = baseline.get(key)
        now = f"{row.verdict.status.value} {row.verdict.code}"
        if not row.passed:
            # known only when it failed before in the same way: a new kind of failure is a new failure
            (diff.known_failures if before == now else diff.new_failures).append(f"{key} ({now})")
        elif before is not None and not before.startswith("PASS"):
            diff.fixed.append(key)
    return diff
