"""Human-readable report of a CheckReport: one row per output and gradient, a legend, the notes that matter.

Compact by default (fits 120 columns: long output names are shortened in the middle); `--verbose` adds
every error column, the captured graphs, the policy and the per-row notes.
"""
from __future__ import annotations

import textwrap

from tabulate import tabulate

WIDTH = 120

# One phrase per verdict code, shown in the legend under the table for the codes that occur.
CODE_PHRASES: dict[str, str] = {
    "bitwise_equal": "compiled has the very same bits as eager",
    "within_tolerance": "compiled is within the policy's rtol/atol of eager",
    "not_worse_than_eager": "compiled differs from eager, but its error against the golden is not worse than eager's",
    "nonfinite_positions_match": "NaN/Inf at the same places as eager and golden; the finite rest passes",
    "worse_than_eager": "compiled's error against the golden is more than the allowed ratio times eager's",
    "outside_tolerance": "outside the tolerance of eager, and no golden to decide (not a floating output)",
    "exact_mismatch": "must be bitwise equal to eager (integers, bools, pure data movement) and is not",
    "nan_inf_mismatch": "NaN/Inf where eager and golden have none, or the reverse",
    "nondeterministic_compiled": "compiled changed between two identical runs while eager did not",
    "shape_mismatch": "compiled's shape differs from eager's",
    "dtype_mismatch": "compiled's dtype differs from eager's",
    "device_mismatch": "compiled's device differs from eager's",
    "structure_mismatch": "compiled and eager return different outputs",
    "type_mismatch": "compiled returns another type than eager",
    "golden_shape_mismatch": "the golden's shape differs from eager's: cannot be judged",
    "empty": "the output has no elements: nothing to judge",
    "golden_all_nan": "the golden is all NaN: nothing to judge against",
    "golden_no_finite": "the golden has no finite value (all NaN/Inf): nothing to judge against",
    "no_finite_values": "no finite value to compare",
}

SHORT_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _dtype(text: str) -> str:
    head, _, rest = str(text).replace("torch.", "").partition(" ")
    return SHORT_DTYPES.get(head, head) + (f" {rest}" if rest else "")


def _bitwise(row) -> str:
    m = row.vs_reference
    if m is None:
        return "-"
    if m.bitwise_equal < 0:
        return "n/a"
    differ = int(m.numel - m.bitwise_equal)
    return "0" if differ == 0 else f"{differ}/{int(m.numel)}"  # the column counts differing elements


def _ratio(row) -> str:
    e, c = row.reference_vs_golden, row.vs_golden
    if e is not None and c is not None and e.rmse == 0 and c.rmse == 0:
        return "0/0"  # both exact against the golden: there is no ratio, and 0 would read as "better"
    return _g(row.error_ratio)


def _pair(e, c, key: str) -> str:
    return f"{_g(e and e.values.get(key))}/{_g(c and c.values.get(key))}"


def _shorten(name: str, width: int) -> str:
    if len(name) <= width:
        return name
    keep = width - 1
    return name[:keep // 2] + "…" + name[len(name) - (keep - keep // 2):]


COMPACT = ["output", "dtype", "eager rmse", "compiled rmse", "ratio", "ULP e/c", "!= eager", "verdict"]
VERBOSE = ["output", "dtype", "eager rmse", "compiled rmse", "ratio", "eager max abs", "compiled max abs",
           "eager max rel", "compiled max rel", "ULP e/c", "!= eager", "verdict"]


def row_cells(row, verbose: bool = False) -> list[str]:
    e, c = row.reference_vs_golden, row.vs_golden
    cells = [row.name, _dtype(row.dtype), _g(e and e.rmse), _g(c and c.rmse), _ratio(row)]
    if verbose:
        cells += [_g(e and e.max_abs), _g(c and c.max_abs), _g(e and e.max_rel), _g(c and c.max_rel)]
    return cells + [_pair(e, c, "ulp_max"), _bitwise(row), f"{row.verdict.status.value} {row.verdict.code}"]


def format_rows(rows: list, verbose: bool = False) -> str:
    body = [row_cells(r, verbose) for r in rows]
    headers = VERBOSE if verbose else COMPACT
    if body and not verbose:  # fit WIDTH: the output name gives way, never the numbers
        # tabulate's "simple": a column is as wide as its widest cell or its header + 2, then 2 spaces
        others = sum(max(len(h) + 2, *(len(b[i]) for b in body)) + 2 for i, h in enumerate(headers) if i)
        limit = max(16, WIDTH - others)
        for b in body:
            b[0] = _shorten(b[0], limit)
    return tabulate(body, headers=headers, tablefmt="simple", disable_numparse=True)


def legend(rows: list) -> list[str]:
    lines = _wrap("errors are against the golden (fp64); ratio = compiled rmse / eager rmse (0/0: both exact); "
                  "ULP e/c: max ULP distance, eager/compiled; != eager: elements whose bits differ from eager", "")
    for code in dict.fromkeys(r.verdict.code for r in rows):
        lines.append(f"  {code}: {CODE_PHRASES.get(code, 'see the message below')}")
    return lines


def nonfinite_notes(rows: list) -> list[str]:
    """A passing row that holds NaN/Inf passes on its finite values only: say so, never silently."""
    out = []
    for r in rows:
        c, g = r.vs_golden, r.reference_vs_golden
        n = int(c.values.get("actual_nonfinite", 0)) if c is not None else 0
        if r.passed and n:
            gold = int(c.values.get("expected_nonfinite", 0))
            eager = int(g.values.get("actual_nonfinite", 0)) if g is not None else 0
            out.append(f"{r.name} holds {n} NaN/Inf in compiled ({eager} in eager, {gold} in the golden), at the "
                       "same places: judged on its finite values only")
    return out


def _wrap(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False) or [indent]


def format_blocks(report) -> list[str]:
    """Per-block errors on eager's own input to each block, and the first block compiled made worse."""
    if not report.blocks:
        return []
    rows = [[d["name"], _g(d["eager_rmse"]), _g(d["compiled_rmse"]), _g(d["ratio"]), d["verdict"] or "-"]
            for d in (b.to_dict() for b in report.blocks)]
    first = report.first_worse_block
    head = ("per block (each on eager's input to it; diagnostic, the verdict is end to end): "
            + (f"first block worse than eager: {first}" if first else
               "no block worse than eager" if report.regional else "compiled blocks need --regional"))
    return ["", *_wrap(head, ""), tabulate(rows, headers=["block", "eager rmse", "compiled rmse", "ratio", "verdict"],
                                           disable_numparse=True), ""]


def format_memory(report) -> str:
    """Peak memory per phase (the device's allocator on CUDA, else host RSS), next to the model's own size."""
    parts = []
    for phase, entry in (getattr(report, "memory", None) or {}).items():
        value = entry.get("device_peak_bytes", entry.get("host_peak_rss_bytes"))
        if value is not None:
            parts.append(f"{phase} {value / 2 ** 30:.2f}")
    where = "device" if any("device_peak_bytes" in e for e in report.memory.values()) else "host RSS"
    size = f"; the model is {report.model_bytes / 2 ** 30:.2f}" if getattr(report, "model_bytes", 0) else ""
    return f"peak memory ({where}, GiB): " + ", ".join(parts) + size if parts else ""


def format_report(report, verbose: bool = False) -> str:
    head = (f"fusecheck check: {report.case}  backend={report.backend}  dtype={_dtype(report.dtype)}  "
            f"device={report.device}  train={report.train}  seed={report.seed}"
            + (f"  toggles={','.join(report.toggles)}" if report.toggles else ""))
    lines = [*_wrap(head, ""), "", format_rows(report.rows, verbose), *legend(report.rows), ""]
    for r in report.rows:
        if not r.passed:
            lines += _wrap(f"{r.verdict.status.value} {r.name}: {r.verdict.message}")
    lines += [x for n in nonfinite_notes(report.rows) for x in _wrap(f"note: {n}")]
    lines += format_blocks(report)
    row_notes: dict[str, list[str]] = {}
    for r in report.rows:
        for n in r.notes:
            row_notes.setdefault(n, []).append(r.name)
    for n, names in row_notes.items():
        if verbose:
            lines += _wrap(f"note {', '.join(names)}: {n}")
        else:
            lines += _wrap(f"note ({len(names)} row{'s' if len(names) > 1 else ''}): {n}")
    scaled = [r.name for r in report.rows if r.atol_scaled]
    if scaled and verbose:
        lines += _wrap(f"note: {len(scaled)} row(s) hold only values below 1 ({', '.join(scaled[:4])}"
                       f"{', …' if len(scaled) > 4 else ''}): atol is scaled down with them (per row in --json)")
    lines += [x for n in report.notes for x in _wrap(f"note: {n}", "")]
    lines += _wrap(f"golden: {report.golden_mode}" + (", blocks compiled one by one (--regional)"
                                                     if report.regional else ""), "")
    memory = format_memory(report)
    if memory:
        lines += _wrap(memory, "")
    if verbose:
        g = [[x.index, x.n_nodes, "yes" if x.movement_only else "no",
              ", ".join(f"{k}×{v}" for k, v in sorted(x.op_counts.items(), key=lambda kv: -kv[1])[:6])]
             for x in report.graphs]
        lines += ["", "captured graphs:", tabulate(g, headers=["graph", "ops", "movement only", "top ops"])]
        census = report.census
        if census is not None and hasattr(census, "n_kernels"):
            lines.append(f"kernels: {census.n_kernels}")
        tol = report.policy.to_dict()
        lines += _wrap(f"policy ({tol['source']}): " + ", ".join(f"{k} rtol={v['rtol']:g} atol={v['atol']:g}"
                                                                for k, v in tol["tolerances"].items())
                       + "; ints/bools exact; ratios " + ", ".join(f"{k} {v:g}" for k, v in tol["ratios"].items()),
                       "")
    else:
        ops = sum(x.n_nodes for x in report.graphs)
        lines.append(f"captured: {len(report.graphs)} graph(s), {ops} ops; policy: {report.policy.to_dict()['source']}"
                     " (--verbose shows the graphs, the policy and every column)")
    lines.append(f"verdict: {report.status} (exit {report.exit_code})")
    return "\n".join(lines)
