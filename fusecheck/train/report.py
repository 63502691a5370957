"""The training check's reports: the JSON dict (per-step series), the text table, JUnit.

Per step the JSON holds the three losses (and the band's range), the whole model's distance to the shadow for
eager, compiled and the band's largest, the drift ratio (compiled / band), the quantities that left the band,
and the distances per block and per kind; per parameter its distance series. Full rows (every metric, the
verdict's message) are kept for the first failing step and the last step.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from fusecheck.report.junit import _root, _write, _x, junit_name
from fusecheck.report.table import compact_number, format_rows, render_table

WHO = ("eager", "compiled", "band")


def _ratio(a: float, b: float) -> float:
    return a / b if b else (0.0 if a == 0 else math.inf)


def step_dict(r) -> dict[str, Any]:
    whole = r.groups["model"]["all"]
    return {"step": r.step, "losses": dict(r.losses), "distance": dict(whole),
            "ratio": {"to_eager": _ratio(whole["compiled"], whole["eager"]),
                      "to_band": _ratio(whole["compiled"], whole["band"])},
            "status": "FAIL" if r.failed else "PASS", "failed": r.failed,
            "by_block": r.groups.get("block", {}), "by_kind": r.groups.get("kind", {})}


def report_dict(rep) -> dict[str, Any]:
    first = rep.first_failed_step
    names = list(rep.results[0].judged) if rep.results else []
    return {
        "tool": "fusecheck train", "case": rep.case, "backend": rep.backend, "dtype": rep.dtype,
        "device": rep.device, "golden_device": rep.golden_device, "optimizer": rep.optimizer, "lr": rep.lr,
        "steps": rep.steps, "seed": rep.seed, "band_runs": rep.band_runs, "compile_optimizer": rep.compile_optimizer,
        "status": rep.status, "exit_code": rep.exit_code, "first_failed_step": first, "left_band": rep.left_band(),
        "notes": list(rep.notes), "policy": rep.policy.to_dict(), "seconds": dict(rep.seconds),
        "memory": rep.memory, "groups": rep.groups,
        "series": [step_dict(r) for r in rep.results],
        "quantities": {n: {**{w: [r.judged[n].distance(w) for r in rep.results] for w in WHO},
                           "verdict": [r.judged[n].row.verdict.code for r in rep.results]} for n in names},
        "rows_at_first_failure": [] if first is None else [j.row.to_dict() for j in rep.results[first].judged.values()],
        "rows_at_last_step": [j.row.to_dict() for j in rep.results[-1].judged.values()] if rep.results else [],
    }


def shown_steps(n: int, first_failed: int | None, at_most: int = 12) -> list[int]:
    """The steps the text table shows: all of a short run, else the first ones, evenly spaced ones, the first
    failing step and the last."""
    if n <= at_most:
        return list(range(n))
    every = max(1, math.ceil(n / (at_most - 3)))
    steps = {0, 1, n - 1, *range(0, n, every)}
    if first_failed is not None:
        steps.add(first_failed)
    return sorted(steps)


def _g(x: float) -> str:
    return compact_number(x) if x is not None and math.isfinite(x) else str(x)


def format_train(rep, verbose: bool = False) -> str:
    head = (f"fusecheck train: {rep.case}  backend {rep.backend}, {rep.dtype} on {rep.device} (shadow "
            f"on {rep.golden_device}), {rep.optimizer} lr {rep.lr:g}, {rep.steps} steps, seed {rep.seed}, band "
            f"of {rep.band_runs} randomised-rounding eager runs{', optimizer compiled' if rep.compile_optimizer else ''}")
    first = rep.first_failed_step
    shown = range(len(rep.results)) if verbose else shown_steps(len(rep.results), first)
    body = []
    for i in shown:
        d = step_dict(rep.results[i])
        lo, dist = d["losses"], d["distance"]
        body.append([str(i), _g(lo["eager"]), _g(lo["compiled"]), _g(lo["shadow"]), _g(dist["eager"]),
                     _g(dist["compiled"]), _g(dist["band"]), _g(d["ratio"]["to_band"]),
                     d["status"] + (f" ({len(d['failed'])})" if d["failed"] else "")])
    headers = ["step", "loss\neager", "loss\ncompiled", "loss\nshadow", "drift\neager", "drift\ncompiled",
               "drift\nband", "ratio\nc/band", "verdict"]
    lines = [head, render_table(headers, body),
             "drift: relative L2 distance of all parameters to the fp64 shadow after the step's update; band: the "
             "largest of eager and its randomised-rounding runs; a step fails when the loss or any parameter is "
             "worse than the band by the check's rule (--json has every step, parameter, block and kind)"]
    if len(shown) < len(rep.results):
        lines.append(f"({len(shown)} of {len(rep.results)} steps shown; -v shows all)")
    if first is not None:
        r = rep.results[first]
        lines.append(f"compiled left eager's band at step {first} on {len(r.failed)} quantit"
                     f"{'y' if len(r.failed) == 1 else 'ies'}: {', '.join(r.failed[:8])}"
                     f"{' …' if len(r.failed) > 8 else ''}")
        lines.append(format_rows([r.judged[n].row for n in r.failed], verbose=verbose))
        lines.append(f"(the eager columns are the band's worst: eager and its {rep.band_runs} randomised-rounding runs)")
    last = rep.results[-1] if rep.results else None
    if last is not None and verbose:
        for by in ("block", "kind"):
            rows = [[g, _g(v["eager"]), _g(v["compiled"]), _g(v["band"])] for g, v in last.groups.get(by, {}).items()]
            if rows:
                lines.append(render_table([by, "drift\neager", "drift\ncompiled", "drift\nband"], rows))
    if rep.notes:
        lines += ["notes:"] + [f"  - {n}" for n in (rep.notes if verbose else rep.notes[:4])]
    secs = ", ".join(f"{k} {v:.1f} s" for k, v in rep.seconds.items())
    lines.append(f"time: {secs}")
    verdict = {0: "PASS: compiled stayed within eager's band at every step",
               1: f"FAIL: compiled left eager's band at step {first}",
               2: "ERROR: a quantity could not be judged"}[rep.exit_code]
    lines.append(f"{verdict} (exit {rep.exit_code})")
    return "\n".join(lines)


def write_junit_train(rep, path: str | Path, suite: str, seconds: float) -> None:
    """One testcase per quantity (the loss, each parameter): a failure names the first step it left the band."""
    names = list(rep.results[0].judged) if rep.results else []
    first_fail: dict[str, int] = {}
    for r in rep.results:
        for n in r.failed:
            first_fail.setdefault(n, r.step)
    errors = {n for r in rep.results for n in r.errors}
    counts = {"tests": len(names), "failures": len(set(first_fail) - errors), "errors": len(errors), "skipped": 0}
    root, ts = _root(suite, seconds, counts)
    share = seconds / max(1, len(names))
    for n in names:
        case = ET.SubElement(ts, "testcase", classname=junit_name(f"fusecheck.train.{suite}.{rep.dtype}"),
                             name=junit_name(n), time=f"{share:.3f}")
        if n in first_fail:
            row = rep.results[first_fail[n]].judged[n].row
            tag = "error" if n in errors else "failure"
            ET.SubElement(case, tag, message=f"step {first_fail[n]}: {row.verdict.code}").text = _x(
                f"left eager's band at step {first_fail[n]}: {row.verdict.message}")
    _write(root, path)
