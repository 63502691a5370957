"""Human-readable report of a CheckReport: one row per output and gradient, then graphs and notes."""
from __future__ import annotations

from tabulate import tabulate

from fusecheck.compare import Comparison


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _bitwise(row: Comparison) -> str:
    m = row.vs_reference
    if m is None:
        return "-"
    if m.bitwise_equal < 0:
        return "n/a"
    differ = int(m.numel - m.bitwise_equal)
    return "yes" if differ == 0 else f"no ({differ}/{int(m.numel)})"


def row_cells(row: Comparison) -> list[str]:
    e, c = row.reference_vs_golden, row.vs_golden
    return [row.name, row.dtype, _g(e and e.rmse), _g(c and c.rmse), _g(e and e.max_abs), _g(c and c.max_abs),
            _g(e and e.max_rel), _g(c and c.max_rel), _g(e and e.ulp_max), _g(c and c.ulp_max),
            _g(row.error_ratio), _bitwise(row), f"{row.verdict.status.value} {row.verdict.code}"]


HEADERS = ["output", "dtype", "eager rmse", "compiled rmse", "eager max abs", "compiled max abs", "eager max rel",
           "compiled max rel", "eager ULP", "compiled ULP", "ratio", "bitwise = eager", "verdict"]


def format_rows(rows: list[Comparison]) -> str:
    return tabulate([row_cells(r) for r in rows], headers=HEADERS, tablefmt="simple")


def format_report(report) -> str:
    lines = [f"fusecheck check: {report.case}  backend={report.backend}  dtype={report.dtype}  device={report.device}"
             f"  train={report.train}  seed={report.seed}" + (f"  toggles={','.join(report.toggles)}" if report.toggles else ""),
             "errors are measured against the golden (fp64); ratio = compiled rmse / eager rmse", "",
             format_rows(report.rows), ""]
    failures = [r for r in report.rows if not r.passed]
    for r in failures:
        lines.append(f"  {r.verdict.status.value} {r.name}: {r.verdict.message}")
    for r in report.rows:
        for n in r.notes:
            lines.append(f"  note {r.name}: {n}")
    scaled = [r.name for r in report.rows if r.atol_scaled]
    if scaled:
        lines.append(f"  note: {len(scaled)} row(s) hold only values below 1 ({', '.join(scaled[:4])}"
                     f"{', …' if len(scaled) > 4 else ''}): atol is scaled down with them (per row in --json)")
    g = [[x.index, x.n_nodes, "yes" if x.movement_only else "no",
          ", ".join(f"{k}×{v}" for k, v in sorted(x.op_counts.items(), key=lambda kv: -kv[1])[:6])]
         for x in report.graphs]
    lines += ["", "captured graphs:", tabulate(g, headers=["graph", "ops", "movement only", "top ops"])]
    census = report.census
    if census is not None and hasattr(census, "n_kernels"):
        lines.append(f"kernels: {census.n_kernels}")
    tol = report.policy.to_dict()
    lines.append(f"policy ({tol['source']}): " + ", ".join(f"{k} rtol={v['rtol']:g} atol={v['atol']:g}"
                                                         for k, v in tol["tolerances"].items())
                 + "; ints/bools exact; ratios " + ", ".join(f"{k} {v:g}" for k, v in tol["ratios"].items()))
    lines += [f"note: {n}" for n in report.notes]
    lines.append(f"verdict: {report.status} (exit {report.exit_code})")
    return "\n".join(lines)
