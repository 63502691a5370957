"""Human-readable report of a `fusecheck dist` check (tables within 120 columns), its JSON file, and `finish`:
printing and writing every report of a command (shared by the pool runner and torchrun)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from fusecheck.distributed.runner import DistReport
from fusecheck.distributed.stats import rate_summary

LAYER_TITLES = {"comm": "1 comm alone (exact, tags)", "compute": "2 compute alone (vs fp64)",
                "whole": "3 whole kernel (vs dist golden)"}


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _lines(text: str, indent: str = "") -> list[str]:
    """`text` within 120 columns (the width of every fusecheck table), continuation lines indented."""
    from fusecheck.report.table import _wrap
    return [x for para in str(text).split("\n") for x in _wrap(para, indent)]


def render(rep: DistReport) -> str:
    from fusecheck.report.table import WIDTH, render_table
    t = rep.task
    head = (f"fusecheck dist {t.spec_ref}: {rep.status}  [{rep.spec.collective}, world {rep.world}"
            f"{f' (subgroup: global ranks {rep.outside}-{rep.outside + rep.world - 1})' if rep.outside else ''}, {rep.backend}, "
            f"{t.dtype}, tiling {dict(rep.spec.tiling)}, repeat {t.repeat}{', stress' if t.stress else ''}, "
            f"{rep.elapsed_s:.2f} s]")
    rows = []
    for name, s in rep.layers.items():
        r = rate_summary(s.failed_runs, s.runs)
        rows.append([LAYER_TITLES[name], s.status, s.runs, s.failed_runs, _pct(r["rate"]), _pct(r["ci95_high"]),
                     ",".join(map(str, s.failing_ranks)) or "-", (s.first_failure or "")[:240]])
    table = render_table(["layer", "verdict", "runs", "failed", "rate", "95% upper\n(Wilson)", "failing\nranks",
                          "first failure"], rows, width=WIDTH, wrap={7: 24, 0: 12})
    out = [*_lines(head), "", table, *_rate_lines(rep)]
    if rep.cross.get("status") not in ("NOT REQUIRED", None):
        out += ["", *_lines(f"cross-rank consistency: {rep.cross['status']} ({len(rep.cross.get('mismatches', []))} "
                            f"mismatching of {rep.cross.get('runs', 0)} runs)")]
    if rep.outcome.status != "ok":
        out += ["", *_lines(f"{rep.outcome.status}: {rep.outcome.detail}")]
        for r, err in sorted(rep.outcome.errors.items()):
            tb = (err.get("traceback") or err.get("message", "")).strip().splitlines()
            role = "culprit" if r in rep.outcome.ranks else "waiting on the culprit"
            out += _lines(f"rank {r} ({role}): " + " | ".join(line.strip() for line in tb[-3:]), "  ")
    decoded = rep.layers["comm"].decoded
    if decoded:
        out.append("\nlayer 1 decoded (first failing run):")
        out.extend(x for line in decoded[:12] for x in _lines(line, "  "))
    tags = next((r.get("tags") for r in rep.results if r.get("tags")), None)
    if tags:
        out += ["", *_lines(f"layer 1 tags: {tags['scheme']} scheme, {tags['description']}")]
    out += ["", *_lines("diagnosis: " + rep.diagnosis.cause)]
    if rep.diagnosis.findings:
        out.append(render_table(["finding", "where", "evidence"], [f.row() for f in rep.diagnosis.findings],
                                width=WIDTH, wrap={2: 40, 0: 24, 1: 12}))
    out.extend(x for c in rep.caveats for x in _lines(f"note: {c}"))
    return "\n".join(out)


def _rate_text(r) -> str:
    lo, hi = r.interval
    if r.failures == 0:
        return f"0/{r.runs} (0%, < {100 * hi:.1f}%)"
    return f"{r.failures}/{r.runs} ({100 * r.rate:.1f}%, {100 * lo:.1f}-{100 * hi:.1f}%)"


def _rate_lines(rep: DistReport) -> list[str]:
    """Failure rate per shape and overall, with its Wilson 95% interval and its unit, for every layer that ran:
    a bug that fails one shape every time reads 100% there and 0% elsewhere, not as a pooled fraction."""
    out = []
    for name, s in rep.layers.items():
        if not s.runs:
            continue
        shapes = s.shape_rates()
        per = ", ".join(f"shape {k} {_rate_text(r)}" for k, r in shapes.items())
        ordinary, probes = s.split_rates()
        split = (f" = ordinary inputs {_rate_text(ordinary)} + probes {_rate_text(probes)}" if probes.runs else "")
        out += _lines(f"{name} failure rate (Wilson 95%): overall {_rate_text(s.overall_rate())}{split}"
                      + (f"; per shape: {per}" if len(shapes) > 1 else "") + f" [unit: {s.unit}]", "  ")
    return ["", *out] if out else []


STATUS_BY_EXIT = {0: "PASS", 1: "FAIL", 2: "ERROR", 3: "HANG/CRASH"}


def _row(p, reports: dict) -> dict:
    rep = reports.get(p.ref)
    if rep is not None:
        return {"spec": p.ref, "status": rep.status, "exit_code": rep.exit_code, "cause": rep.diagnosis.cause,
                "layers": {n: s.status for n, s in rep.layers.items()}, "elapsed_s": rep.elapsed_s}
    if p.skip:
        return {"spec": p.ref, "status": "SKIP", "exit_code": 0, "cause": p.skip, "layers": {}, "elapsed_s": 0.0}
    return {"spec": p.ref, "status": "ERROR", "exit_code": 2, "cause": f"spec error: {p.error}" if p.error else
            "not run", "layers": {}, "elapsed_s": 0.0}


def summary_json(planned: list, reports: dict) -> dict:
    """Several targets: one row each, one exit code (the worst: a hang or crash over a broken spec over a fail)."""
    rows = [_row(p, reports) for p in planned]
    code = max((r["exit_code"] for r in rows), default=0)
    if not any(r["status"] != "SKIP" for r in rows):
        code = 2     # nothing could run here: never a PASS
    return {"tool": "fusecheck dist", "status": STATUS_BY_EXIT[code], "exit_code": code, "summary": rows,
            "checks": [reports[p.ref].to_dict() for p in planned if p.ref in reports]}


def render_summary(planned: list, reports: dict) -> str:
    data = summary_json(planned, reports)
    rows = [[r["spec"], r["status"], *(r["layers"].get(n, "-") for n in ("comm", "compute", "whole")),
             f"{r['elapsed_s']:.1f}", r["cause"]] for r in data["summary"]]
    from fusecheck.report.table import WIDTH, render_table
    return (f"fusecheck dist summary: {data['status']} (exit {data['exit_code']}), {len(rows)} spec(s)\n"
            + render_table(["spec", "verdict", "comm", "compute", "whole", "s", "cause"], rows, width=WIDTH,
                           wrap={6: 30, 0: 24}))


def write_json(rep: DistReport | dict, path: str | Path) -> None:
    data = rep if isinstance(rep, dict) else rep.to_dict()
    Path(path).write_text(json.dumps(data, indent=1, default=str))


def finish(planned: list, reports: dict, args) -> int:
    """Print every report (and a summary when there are several targets), write the JSON, return the exit code."""
    from fusecheck.cli.report_paths import write_reports
    from fusecheck.report.html import write_html
    data = summary_json(planned, reports)
    first = reports.get(planned[0].ref)
    write_reports([  # before any verdict is printed: a report that cannot be written is exit 3, one line
        ("--json", args.json, lambda: write_json(first.to_dict() if len(planned) == 1 else data, args.json)),
        ("--html", getattr(args, "html", None) if reports else None,   # several specs: one page, a summary first
         lambda: write_html("dist", first.to_dict() if len(planned) == 1 else data, args.html))],
        verdict=f"{data['status']} (exit {data['exit_code']})")
    for p in planned:
        if p.ref in reports:
            print(render(reports[p.ref]) + "\n")
        elif p.error:
            print(f"fusecheck dist: error: {p.error}", file=sys.stderr)
    if len(planned) > 1:
        print(render_summary(planned, reports))
    return data["exit_code"]
