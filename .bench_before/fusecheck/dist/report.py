"""Human-readable report of a `fusecheck dist` check (tabulate tables) and its JSON file."""
from __future__ import annotations

import json
from pathlib import Path

from tabulate import tabulate

from fusecheck.dist.runner import DistReport
from fusecheck.dist.stats import rate_summary

LAYER_TITLES = {"comm": "1 comm alone (exact, tags)", "compute": "2 compute alone (vs fp64)",
                "whole": "3 whole kernel (vs dist golden)"}


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def render(rep: DistReport) -> str:
    t = rep.task
    head = (f"fusecheck dist {t.spec_ref}: {rep.status}  [{rep.spec.collective}, world {rep.world}, {rep.backend}, "
            f"{t.dtype}, tiling {dict(rep.spec.tiling)}, repeat {t.repeat}{', stress' if t.stress else ''}, "
            f"{rep.elapsed_s:.2f} s]")
    rows = []
    for name, s in rep.layers.items():
        r = rate_summary(s.failed_runs, s.runs)
        rows.append([LAYER_TITLES[name], s.status, s.runs, s.failed_runs, _pct(r["rate"]), _pct(r["ci95_high"]),
                     ",".join(map(str, s.failing_ranks)) or "-", (s.first_failure or "")[:90]])
    out = [head, "", tabulate(rows, ["layer", "verdict", "runs", "failed", "rate", "95% upper (Wilson)",
                                     "failing ranks", "first failure"], tablefmt="github")]
    if rep.cross.get("status") not in ("NOT REQUIRED", None):
        out.append(f"\ncross-rank consistency: {rep.cross['status']} ({len(rep.cross.get('mismatches', []))} "
                   f"mismatching of {rep.cross.get('runs', 0)} runs)")
    if rep.outcome.status != "ok":
        out.append(f"\n{rep.outcome.status}: {rep.outcome.detail}")
        for r, err in sorted(rep.outcome.errors.items()):
            tb = (err.get("traceback") or err.get("message", "")).strip().splitlines()
            role = "culprit" if r in rep.outcome.ranks else "waiting on the culprit"
            out.append(f"  rank {r} ({role}): " + " | ".join(tb[-3:]))
    decoded = rep.layers["comm"].decoded
    if decoded:
        out.append("\nlayer 1 decoded (first failing run):")
        out.extend("  " + line for line in decoded[:12])
    out.append("\ndiagnosis: " + rep.diagnosis.cause)
    if rep.diagnosis.findings:
        out.append(tabulate([f.row() for f in rep.diagnosis.findings], ["finding", "where", "evidence"],
                            tablefmt="github", maxcolwidths=[40, 20, 90]))
    return "\n".join(out)


def write_json(rep: DistReport, path: str | Path) -> None:
    Path(path).write_text(json.dumps(rep.to_dict(), indent=1, default=str))
