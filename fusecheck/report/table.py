"""Human-readable report of a CheckReport: one row per output and gradient, a legend, the notes that matter.

Compact by default (fits 120 columns); `--verbose` adds every error column, the captured graphs, the policy
and the per-row notes. Row names are never elided: when they do not fit, the longest start that many of them
share (`grad.model.model.layers.`) is written `…` and said once above the table, and a name still too long
wraps onto the next line at a `.` (the lines of a cell, joined, are the name). `render_table` is the one
table layout of every command (check, matrix, bisect, dist): two-line headers, columns that give way by wrapping.
"""
from __future__ import annotations

import re
import textwrap

from tabulate import tabulate

from fusecheck import dtypes
from fusecheck.compare.verdict import TOLERANCE_DECIDED
from fusecheck.report.kinds import by_kind

WIDTH = 120

# One phrase per verdict code, shown in the legend under the table for the codes that occur.
CODE_PHRASES: dict[str, str] = {
    "bitwise_equal": "compiled has the very same bits as eager",
    "within_tolerance": "compiled is within the policy's rtol/atol of eager",
    "not_worse_than_eager": "compiled differs from eager, but its error against the golden is not worse than eager's",
    "nonfinite_positions_match": "NaN/Inf at the same places as eager and golden; the finite rest passes",
    "beyond_range": "a magnitude probe the unfused chain itself cannot hold in its dtype: not judged",
    "worse_than_eager": "compiled's error against the golden is more than the allowed ratio times eager's",
    "outside_tolerance": "outside the tolerance of eager, and no golden to decide (not a floating output)",
    "follows_float_ties": "an integer/bool made from floats: eager differs from the golden too, compiled not more",
    "exact_mismatch": "must be bitwise equal to eager (integers, bools, pure data movement) and is not",
    "nan_inf_mismatch": "NaN/Inf where eager and golden have none, or the reverse",
    "nondeterministic_compiled": "compiled changed between two identical runs while eager did not",
    "ignores_inputs": "compiled gave the same bits on other inputs while eager's result moved: it ignores its inputs",
    "rolled_call_worse": "the compiled call on other inputs is worse than eager whatever the golden there",
    "shape_mismatch": "compiled's shape differs from eager's",
    "dtype_mismatch": "compiled's dtype differs from eager's",
    "device_mismatch": "compiled's device differs from eager's",
    "structure_mismatch": "compiled and eager return different outputs",
    "type_mismatch": "compiled returns another type than eager",
    "golden_shape_mismatch": "the golden's shape differs from eager's: cannot be judged",
    "empty": "the output has no elements: nothing to judge",
    "empty_equal": "no elements, as eager's (same shape and dtype), beside results that were judged",
    "golden_all_nan": "the golden is all NaN: nothing to judge against",
    "golden_no_finite": "the golden has no finite value (all NaN/Inf): nothing to judge against",
    "no_finite_values": "no finite value to compare",
}

def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _dtype(text: str) -> str:
    head, _, rest = str(text).replace("torch.", "").partition(" ")
    return (dtypes.short_name(head) or head) + (f" {rest}" if rest else "")


def _bitwise(row) -> str:
    m = row.vs_reference
    if m is None:
        return "-"
    if m.bitwise_equal < 0:
        return "n/a"
    differ = int(m.numel - m.bitwise_equal)
    return "0" if differ == 0 else f"{count(differ)}/{count(m.numel)}"  # the column counts differing elements


def _ratio(row) -> str:
    e, c = row.reference_vs_golden, row.vs_golden
    if e is not None and c is not None and e.rmse == 0 and c.rmse == 0:
        return "0/0"  # both exact against the golden: there is no ratio, and 0 would read as "better"
    return _g(row.error_ratio)


def _pair(e, c, key: str) -> str:
    return f"{compact_number(e and e.values.get(key))}/{compact_number(c and c.values.get(key))}"


def compact_number(x: float | None) -> str:
    """3 significant digits with a short exponent (6.26e17, 1.2e-5): for columns whose values span decades."""
    text = _g(x)
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m[1] == "-" else "") + m[2], text)


def count(n: int) -> str:
    """An element count: exact below 100000, else 3 digits and k/M/G/T (1.05M), so that the column stays
    narrow on a 500M-element gradient; the JSON keeps the exact number."""
    n = int(n)
    if abs(n) < 100_000:
        return str(n)
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)  # pragma: no cover


# -- one table layout for every command ----------------------------------------------------------------------
# a `.` between digits (0.0004, layers.11) is no place to break
_BREAKS = (re.compile(r"(?:[^./ ,|]|(?<=\d)\.(?=\d))*(?:[./ ,|]+|$)"), re.compile(r"[^_-]*(?:[_-]+|$)"))


def _tokens(text: str, width: int, level: int = 0) -> list[str]:
    """Pieces of `text` to wrap between: after `.`, `/`, `,`, `|` or a space; a piece still wider than `width`
    after `_` or `-`; then cut."""
    if level == len(_BREAKS):
        return [text[i:i + width] for i in range(0, len(text), width)] or [""]
    out = []
    for tok in (t for t in _BREAKS[level].findall(text) if t):
        out += [tok] if len(tok.rstrip()) <= width else _tokens(tok, width, level + 1)
    return out


def wrap_cell(text: str, width: int) -> str:
    """`text` on lines of at most `width`, broken after a `.` (not one between digits), `/`, `,` or space (then after
    `_`/`-`, then anywhere). Nothing is dropped: the lines, joined, are `text` again (only trailing spaces
    at a break are left out)."""
    width = max(1, width)
    out = []
    for para in str(text).split("\n"):
        lines, cur = [], ""
        for tok in _tokens(para, width):
            if cur and len(cur) + len(tok.rstrip()) > width:
                lines.append(cur)
                cur = ""
            cur += tok
        lines.append(cur)
        out += [line.rstrip() for line in lines]
    return "\n".join(out)


def _cell_width(text: str) -> int:
    return max((len(line) for line in str(text).split("\n")), default=0)


def render_table(headers: list[str], body: list[list], *, width: int = WIDTH, wrap: dict[int, int] | None = None,
                 gap: int = 2) -> str:
    """A plain table: a header (a `\n` in a header makes it two lines, bottom-aligned), a rule, one row per
    entry, left-aligned cells, `gap` spaces between columns. When it would be wider than `width`, the columns
    named in `wrap` (index -> the narrowest it may become) give way in that order, their cells wrapped by
    `wrap_cell`; the others never change."""
    cells = [["" if c is None else str(c) for c in row] for row in body]
    heads = [h.split("\n") for h in headers]
    widths = [max([len(x) for x in h] + [_cell_width(r[i]) for r in cells if i < len(r)]) for i, h in enumerate(heads)]
    total = sum(widths) + gap * (len(widths) - 1)
    for i, narrowest in (wrap or {}).items():
        if total <= width:
            break
        header_w = max(len(x) for x in heads[i])
        new = max(narrowest, header_w, widths[i] - (total - width))
        if new < widths[i]:
            for r in cells:
                if i < len(r):
                    r[i] = wrap_cell(r[i], new)
            total -= widths[i] - new
            widths[i] = new
    depth = max(len(h) for h in heads)
    sep = " " * gap

    def line(parts: list[str]) -> str:
        return sep.join(p.ljust(w) for p, w in zip(parts, widths)).rstrip()

    out = [line([(h[j - depth + len(h)] if j - depth + len(h) >= 0 else "") for h in heads]) for j in range(depth)]
    out.append(sep.join("-" * w for w in widths))
    for r in cells:
        split = [c.split("\n") for c in r] + [[""]] * (len(widths) - len(r))
        for j in range(max(len(c) for c in split)):
            out.append(line([c[j] if j < len(c) else "" for c in split]))
    return "\n".join(out)


def shared_start(names: list[str], need: int) -> str:
    """The start (up to a `.` or `/`) that saves the most characters over the names longer than `need`
    (at least two of them share it), or '' when none saves anything."""
    long = [n for n in names if len(n) > need]
    counts: dict[str, int] = {}
    for n in long:
        for m in re.finditer(r"[./]", n):
            if m.end() < len(n):
                counts[n[:m.end()]] = counts.get(n[:m.end()], 0) + 1
    best = max(((c * (len(p) - 1), len(p), p) for p, c in counts.items() if c >= 2 and len(p) > 2), default=None)
    return best[2] if best else ""


def fit_names(names: list[str], room: int) -> tuple[list[str], str]:
    """Row names for a column of `room` characters: whole when they fit; else the start many share is written
    `…` (returned, to be said once above the table). Each shown name is unique as the names are: `…` stands
    for one string, and a name without that start keeps its own."""
    if not names or max(len(n) for n in names) <= room:
        return list(names), ""
    start = shared_start(names, room)
    if not start:
        return list(names), ""
    return [("…" + n[len(start):]) if n.startswith(start) and len(n) > len(start) else n for n in names], start


def shared_start_line(start: str, shown: list[str]) -> list[str]:
    if not start:
        return []
    n = sum(s.startswith("…") for s in shown)
    return _wrap(f"names: … stands for {start} (the start of {n} row names; --json has every name whole)", "")


COMPACT = ["output", "dtype", "eager\nrmse", "compiled\nrmse", "ratio", "ULP\ne/c", "!=\neager", "verdict"]
VERBOSE = ["output", "dtype", "eager\nrmse", "compiled\nrmse", "ratio", "eager\nmax abs", "compiled\nmax abs",
           "eager\nmax rel", "compiled\nmax rel", "ULP\ne/c", "!=\neager", "verdict"]


def row_cells(row, verbose: bool = False) -> list[str]:
    e, c = row.reference_vs_golden, row.vs_golden
    cells = [row.name, _dtype(row.dtype), _g(e and e.rmse), _g(c and c.rmse), _ratio(row)]
    if verbose:
        cells += [_g(e and e.max_abs), _g(c and c.max_abs), _g(e and e.max_rel), _g(c and c.max_rel)]
    return cells + [_pair(e, c, "ulp_max"), _bitwise(row), f"{row.verdict.status.value} {row.verdict.code}"]


NAME_MIN = 16  # the name column never gets narrower
NAME_MIN_VERBOSE = 28  # -v shows every column: its table may pass WIDTH rather than cut every name in pieces


def format_rows(rows: list, verbose: bool = False, counts: list[str] | None = None) -> str:
    """The rows' table, within WIDTH where the numbers allow: the names give way (shared start, then wrap),
    never the numbers. Above it, one line says what `…` stands for when a shared start was left out.
    `counts`: a `rows` column after the names (a table grouped by kind, fusecheck/report/kinds.py)."""
    body = [row_cells(r, verbose) for r in rows]
    headers = VERBOSE if verbose else COMPACT
    if counts is not None:
        body = [[b[0], c, *b[1:]] for b, c in zip(body, counts)]
        headers = [headers[0], "rows", *headers[1:]]
    others = sum(max([len(x) for x in h.split("\n")] + [len(b[i]) for b in body]) + 2
                 for i, h in enumerate(headers) if i)
    narrowest = NAME_MIN_VERBOSE if verbose else NAME_MIN
    room = max(narrowest, WIDTH - others)
    shown, start = fit_names([b[0] for b in body], room)
    for b, name in zip(body, shown):
        b[0] = name
    table = render_table(headers, body, width=WIDTH, wrap={0: narrowest})
    return "\n".join([*shared_start_line(start, shown), table])


def legend(rows: list) -> list[str]:
    lines = _wrap("errors are against the golden (fp64); ratio = compiled rmse / eager rmse (0/0: both exact); "
                  "ULP e/c: max ULP distance, eager/compiled; != eager: elements whose bits differ from eager", "")
    for code in dict.fromkeys(r.verdict.code for r in rows):
        lines += _wrap(f"{code}: {CODE_PHRASES.get(code, 'see the message below')}")
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


def tolerance_notes(rows: list, shown: int = 5) -> list[str]:
    """A PASS by the policy's tolerance at an error well above eager's (or one the golden checks alone would
    fail) is the policy's relaxation deciding: printed, never only in the JSON (a 3-bit loss in fp32 is within
    rtol 1e-5). The first `shown`, then how many more."""
    out = [f"{r.name}: {r.verdict.message}" for r in rows
           if r.passed and r.verdict.code == "within_tolerance" and TOLERANCE_DECIDED in r.verdict.message]
    more = len(out) - shown
    return out if more <= 0 else out[:shown] + [f"{more} more row(s) passed by the tolerance alone; --json has each"]


def _wrap(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=True, break_on_hyphens=False) or [indent]


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
    return ["", *_wrap(head, ""), render_table(["block", "eager\nrmse", "compiled\nrmse", "ratio", "verdict"], rows,
                                               wrap={0: NAME_MIN}), ""]


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
    shown, counts = (list(report.rows), None) if verbose else by_kind(report.rows)
    grouped = [] if counts is None else _wrap(
        f"{len(report.rows)} rows shown as {len(shown)} kinds (names alike but for a block index), nearest to "
        "the limit first, each by its worst row; -v, --json and --html have every row", "")
    lines = [*_wrap(head, ""), "", *grouped, format_rows(shown, verbose, counts), *legend(report.rows), ""]
    for r in report.rows:
        if not r.passed:
            lines += _wrap(f"{r.verdict.status.value} {r.name}: {r.verdict.message}")
    lines += [x for n in nonfinite_notes(report.rows) + tolerance_notes(report.rows) for x in _wrap(f"note: {n}")]
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
