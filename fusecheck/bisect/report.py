"""Rendering a BisectResult: the culprit table (within 120 columns) and JSON."""
from __future__ import annotations

import json
from typing import Any

from fusecheck.bisect.result import BisectResult
from fusecheck.report.json_report import write_json as write_report_json


def _rmse(summary: dict[str, Any] | None) -> str:
    if not summary:
        return "-"
    parts = []
    for name, row in summary.get("rows", {}).items():
        if row.get("rmse") is None:
            continue
        parts.append(f"{name}: {row['rmse']:.3g} (eager {row['eager_rmse']:.3g}) {row['status']}")
    return "\n".join(parts) or "-"


def _short(items: list[str], n: int = 6) -> str:
    return ", ".join(items[:n]) + (f", +{len(items) - n}" if len(items) > n else "")


def format_result(result: BisectResult) -> str:
    from fusecheck.report.table import WIDTH, _wrap, render_table
    lines = [*_wrap(f"bisect: {result.status.upper()} - {result.message}", ""),
             *_wrap(f"compiles used: {result.compiles}/{result.max_compiles}, {result.seconds:.1f} s; decisions "
                    "counted: " + ", ".join(f"{k} {v}" for k, v in result.decisions.items()), "")]
    if result.unavailable:
        lines += [x for k, v in result.unavailable.items() for x in _wrap(f"gate unavailable: {k}: {v}", "")]
    if result.culprits:
        rows = [[i + 1, c.decision.kind + (" (partial)" if c.partial else ""), c.decision.name,
                 _short(c.decision.fx_nodes) or "-", _short(c.kernels, 3) or "-", _rmse(c.with_it),
                 _rmse(c.without_it)] for i, c in enumerate(result.culprits)]
        lines.append(render_table(["#", "kind", "decision", "FX nodes", "kernel", "rmse vs golden\nwith it",
                                   "\nwithout it"], rows, width=WIDTH,
                                  wrap={3: 16, 4: 16, 2: 20, 5: 24, 6: 24}))
        for i, c in enumerate(result.culprits):
            if c.enabled_by:
                lines += _wrap(f"culprit {i + 1}: {c.chain}", "")
            if c.alternatives:
                lines += _wrap(f"culprit {i + 1}: also fixed it (not chosen): " + "; ".join(c.alternatives), "")
    if result.kernels:
        rows = [[getattr(k, "culprit", "") or "-", k.graph, k.kernel, _short(k.fx_nodes, 4), k.output, k.status,
                 f"{k.rmse:.3g}", f"{k.eager_rmse:.3g}", f"{k.ratio:.3g}" if k.ratio is not None else "-"]
                for k in result.kernels]
        lines.append("per-kernel attribution (kernel outputs vs its FX subgraph, eager dtype and fp64):")
        lines.append(render_table(["culprit", "graph", "kernel", "FX nodes", "output", "verdict", "rmse",
                                   "eager\nrmse", "ratio"], rows, width=WIDTH, wrap={3: 20, 4: 20, 2: 20}))
        if any(getattr(k, "culprit", "") for k in result.kernels):
            lines += _wrap("culprit N: the kernel holds FX nodes of culprit N (judged against the graph as "
                           "rewritten, it may match it: the culprit's effect is in its row above)", "")
    return "\n".join(lines)


def write_json(result: BisectResult, path: str) -> None:
    """Strict JSON (inf severities as strings), through the same writer as `fusecheck check --json`."""
    write_report_json(json.loads(json.dumps(result.to_dict(), default=str)), path)
