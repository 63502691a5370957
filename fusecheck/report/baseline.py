"""Baselines for the merge gate: known failures recorded once, so CI fails only on new ones.

`fusecheck check ... --json base.json` writes a baseline; `--baseline base.json` later marks rows that
failed in it the same way as known (reported, not gating) and rows that failed before but pass now as
fixed. A row is the same row only under the same case, backend, device, dtype, mode and toggles; the dtype
and a FILE.py:NAME backend are normalised so that `--dtype fp32` matches a float32 model run without it
and a backend path matches however it was spelled.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


from fusecheck.errors import BaselineError  # noqa: E402,F401


@dataclass
class BaselineDiff:
    new_failures: list[str] = field(default_factory=list)
    known_failures: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)
    unmatched: bool = False  # no row of this run is in the baseline at all
    other_model: bool = False  # the baseline was recorded for another model under the same case name
    known_names: set[str] = field(default_factory=set)  # row names of the known failures (for JUnit)

    @property
    def gate_passes(self) -> bool:
        return not self.new_failures

    def lines(self) -> list[str]:
        out = [f"baseline: new failure {n}" for n in self.new_failures]
        out += [f"baseline: known failure {n} (accepted by the baseline)" for n in self.known_failures]
        out += [f"baseline: fixed {n} (update the baseline)" for n in self.fixed]
        if self.other_model:
            out.append("baseline: recorded for another model under this case name (its parameters, buffers or "
                       "input shapes differ); every failure counts as new")
        elif self.unmatched:
            out.append("baseline: no row of this run (case/backend/device/dtype/mode/toggles) is in the baseline; "
                       "every failure counts as new")
        return out

    def to_dict(self) -> dict:
        return {"new_failures": self.new_failures, "known_failures": self.known_failures, "fixed": self.fixed,
                "unmatched": self.unmatched, "other_model": self.other_model}


def _backend(name: str) -> str:
    """A FILE.py:NAME backend by its path relative to the working directory when it lies below it (a CI
    checkout elsewhere still matches), else absolute."""
    file, sep, attr = name.rpartition(":")
    if not (sep and file.endswith(".py")):
        return name
    path = Path(file).resolve()
    try:
        path = path.relative_to(Path.cwd().resolve())
    except ValueError:
        pass
    return f"{path}:{attr}"


SIGNATURE_PREFIX = "#signature/"


def _key(report: dict, name: str) -> str:
    toggles = ",".join(sorted(report.get("toggles") or [])) or "-"
    dtype = str(report["dtype"]).split(" ")[0]  # "float32 (the model's own)" is float32
    return (f"{report['case']}/{_backend(report['backend'])}/{report['device']}/{dtype}/"
            f"{'train' if report['train'] else 'fwd'}/{toggles}/{name}")


def load_baseline(path: str | Path) -> dict[str, str]:
    """Map row key -> 'STATUS code' from a report JSON written by --json (one report or a list)."""
    try:
        data = json.loads(Path(path).read_text())
        reports = data if isinstance(data, list) else [data]
        rows = {_key(r, row["name"]): f"{row['verdict']['status']} {row['verdict']['code']}"
                for r in reports for row in r["rows"]}
        # the model each report was made for, under its run's key (old reports have none: not checked)
        rows.update({SIGNATURE_PREFIX + _key(r, ""): r["model_signature"] for r in reports
                     if r.get("model_signature")})
        return rows
    except OSError as exc:
        raise BaselineError(f"--baseline {path}: cannot read it ({exc.strerror or exc})") from exc
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BaselineError(f"--baseline {path}: not a `fusecheck check --json` report "
                            f"({type(exc).__name__}: {exc})") from exc


def diff_against(report, baseline: dict[str, str]) -> BaselineDiff:
    diff = BaselineDiff()
    header = {"case": report.case, "backend": report.backend, "device": report.device, "dtype": report.dtype,
              "train": report.train, "toggles": list(report.toggles)}
    recorded = baseline.get(SIGNATURE_PREFIX + _key(header, ""))
    if recorded and getattr(report, "model_signature", "") and recorded != report.model_signature:
        diff.other_model = diff.unmatched = True
        diff.new_failures = [f"{_key(header, r.name)} ({r.verdict.status.value} {r.verdict.code})"
                             for r in report.rows if not r.passed]
        return diff
    matched = False
    for row in report.rows:
        key = _key(header, row.name)
        before = baseline.get(key)
        matched |= before is not None
        now = f"{row.verdict.status.value} {row.verdict.code}"
        if not row.passed:
            # known only when it failed before in the same way: a new kind of failure is a new failure.
            # ERROR rows (nothing could be judged) are never accepted: they keep the exit code at 2
            if row.verdict.status.value == "ERROR":
                diff.new_failures.append(f"{key} ({now})")
                continue
            (diff.known_failures if before == now else diff.new_failures).append(f"{key} ({now})")
            if before == now:
                diff.known_names.add(row.name)
        elif before is not None and not before.startswith("PASS"):
            diff.fixed.append(key)
    diff.unmatched = not matched
    return diff
