"""`--html FILE`: one self-contained page (inline CSS and SVG, no script, no network) per command.

Each renderer takes the command's JSON report dict (what `--json` writes), so a page can also be made later
from a saved JSON: `python -m fusecheck.report.html [check] r.json r.html` (the kind is read from the report).

- check: verdict, a summary table, per output/gradient eager's and compiled's error against the golden
  (the quantile curve and histogram of |err| when the report has a row "distribution", else the metrics
  side by side), the per-block error curve ("blocks") and peak memory ("memory") when present;
- matrix: the toggle matrix as a heat map (log2 of each output's rmse against the reference row);
- bisect: the chain from the failing baseline through each culprit to the run with them held off;
- dist: the per-layer x per-rank grid of verdicts.
"""
from __future__ import annotations

import html
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

EAGER, COMPILED = "#3b6fb6", "#d9622b"
STATUS_COLORS = {"PASS": "#2e8b57", "FAIL": "#c0392b", "ERROR": "#7f8c8d", "HANG": "#8e44ad", "CRASH": "#8e44ad"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1180px;
 color:#1d2330;background:#fafbfc;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde1e6;padding-bottom:4px}
.meta{color:#5b6473}.badge{display:inline-block;padding:1px 9px;border-radius:10px;color:#fff;font-weight:600;
 font-size:12px;vertical-align:middle}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #e3e6ea;padding:3px 8px;text-align:right;
 font-variant-numeric:tabular-nums}th{background:#f1f3f6;font-weight:600}td.l,th.l{text-align:left}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:12px}
.card{background:#fff;border:1px solid #e3e6ea;border-radius:6px;padding:10px 12px}
.card h3{font-size:14px;margin:0 0 2px;word-break:break-all}.msg{color:#5b6473;font-size:12px;margin:2px 0 6px}
.legend span{margin-right:14px}.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px}
.chain{display:flex;flex-wrap:wrap;align-items:stretch;gap:6px}.link{background:#fff;border:1px solid #e3e6ea;
 border-radius:6px;padding:8px 10px;min-width:170px;max-width:300px}.arrow{align-self:center;font-size:22px;color:#9aa3af}
.error{background:#fdecea;border:1px solid #f5c6cb;padding:10px;border-radius:6px;white-space:pre-wrap}
details{margin-top:12px}pre{white-space:pre-wrap;font-size:12px;background:#fff;border:1px solid #e3e6ea;padding:8px}
svg text{font:11px system-ui,sans-serif;fill:#5b6473}
"""



def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(x: Any) -> float | None:
    """JSON numbers, and inf/nan that the JSON writer stored as strings."""
    if isinstance(x, bool) or x is None:
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _g(x: Any) -> str:
    v = _num(x)
    return "-" if v is None else f"{v:.3g}"


def _badge(status: str) -> str:
    word = str(status).split(" ")[0]
    return f'<span class="badge" style="background:{STATUS_COLORS.get(word, "#7f8c8d")}">{_e(status)}</span>'


def _phrase(code: str) -> str:
    from fusecheck.report.table import CODE_PHRASES
    return CODE_PHRASES.get(code, "")


def _page(title: str, body: Iterable[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{_e(title)}</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


# -- SVG charts ---------------------------------------------------------------------------------------
def _log_axis(values: list[float]) -> tuple[float, float]:
    pos = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not pos:
        return -1.0, 1.0
    lo, hi = math.floor(math.log10(min(pos))), math.ceil(math.log10(max(pos)))
    return float(lo), float(hi if hi > lo else lo + 1)


def line_chart(series: list[tuple[str, str, list[float | None]]], labels: list[str], *, width: int = 360,
               height: int = 180, y_title: str = "", marks: list[str] | None = None) -> str:
    """Lines on a log10 y axis over categorical x `labels`; `marks` colours the x labels (e.g. by verdict).
    Zeros and missing values leave a gap: a log axis has no place for them."""
    left, right, top, bottom = 48, 34, 10, 34
    w, h = width - left - right, height - top - bottom
    lo, hi = _log_axis([v for _, _, vals in series for v in vals if v is not None])
    lo, hi = lo - 0.2, hi + 0.1  # room for the points on the first and last decade
    n = max(1, len(labels) - 1)

    def x(i: int) -> float:
        return left + (w * i / n if len(labels) > 1 else w / 2)

    def y(v: float) -> float:
        return top + h * (hi - math.log10(v)) / (hi - lo)

    out = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    step = max(1, int((hi - lo) // 6) + (1 if (hi - lo) % 6 else 0))
    for d in range(math.ceil(lo), math.floor(hi) + 1, step):
        yy = y(10.0 ** d)
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eceff3"/>'
                   f'<text x="{left - 4}" y="{yy + 4:.1f}" text-anchor="end">1e{d}</text>')
    every = max(1, math.ceil(len(labels) / 12))
    for i, lab in enumerate(labels):
        if i % every == 0 or i == len(labels) - 1:
            color = f' style="fill:{marks[i]}"' if marks and marks[i] else ""
            out.append(f'<text x="{x(i):.1f}" y="{top + h + 14}" text-anchor="middle"{color}>{_e(lab)[:14]}</text>')
    if y_title:
        out.append(f'<text x="{left}" y="{height - 4}">{_e(y_title)}</text>')
    for name, color, vals in series:
        segs, cur = [], []
        for i, v in enumerate(vals):
            if v is None or v <= 0 or not math.isfinite(v):
                if cur:
                    segs.append(cur)
                cur = []
                continue
            cur.append(f"{x(i):.1f},{y(v):.1f}")
        if cur:
            segs.append(cur)
        for seg in segs:
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(seg)}"/>')
            if len(labels) <= 40:
                out += [f'<circle cx="{p.split(",")[0]}" cy="{p.split(",")[1]}" r="2.5" fill="{color}"/>'
                        for p in seg]
        out.append(f"<title>{_e(name)}</title>")
    out.append("</svg>")
    return "".join(out)


def bar_chart(groups: list[tuple[str, float | None, float | None]], *, width: int = 360, height: int = 170) -> str:
    """Eager's and compiled's value side by side per metric, each metric on its own log scale (bar length
    is decades below the larger of the two, so a 10x worse compiled is one decade longer)."""
    left, top, row_h = 92, 6, (height - 12) / max(1, len(groups))
    out = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    span = width - left - 60
    for k, (name, e, c) in enumerate(groups):
        y0 = top + k * row_h
        out.append(f'<text x="{left - 6}" y="{y0 + row_h / 2 + 4:.1f}" text-anchor="end">{_e(name)}</text>')
        vals = [v for v in (e, c) if v is not None and v > 0 and math.isfinite(v)]
        top_v = max(vals) if vals else 1.0
        for j, (v, color) in enumerate(((e, EAGER), (c, COMPILED))):
            yy = y0 + 3 + j * (row_h - 6) / 2
            if v is None or not math.isfinite(v):
                out.append(f'<text x="{left + 2}" y="{yy + 9:.1f}">{_g(v)}</text>')
                continue
            decades = 0 if v <= 0 else max(0.0, 6 + math.log10(v / top_v))  # 6 decades shown
            length = span * decades / 6
            out.append(f'<rect x="{left}" y="{yy:.1f}" width="{length:.1f}" height="{(row_h - 8) / 2:.1f}" '
                       f'fill="{color}"/><text x="{left + length + 4:.1f}" y="{yy + 9:.1f}">{_g(v)}</text>')
    out.append("</svg>")
    return "".join(out)


def histogram_chart(eager: dict, compiled: dict, *, width: int = 360, height: int = 150) -> str:
    """Both histograms of log10 |err| as step outlines over the same fixed bins (fraction of elements)."""
    lo, hi, step = eager["log10_bins"]
    ce, cc = eager["counts"][1:-1], compiled["counts"][1:-1]
    used = [i for i, (a, b) in enumerate(zip(ce, cc)) if a or b]
    if not used:
        return '<p class="msg">every error is below 1e-16 (or zero)</p>'
    first, last = max(0, used[0] - 1), min(len(ce) - 1, used[-1] + 1)
    left, right, top, bottom = 48, 10, 8, 30
    w, h = width - left - right, height - top - bottom
    ne, nc = max(1, sum(eager["counts"])), max(1, sum(compiled["counts"]))
    peak = max(max(a / ne for a in ce), max(b / nc for b in cc)) or 1.0
    bins = last - first + 1

    def x(i: float) -> float:
        return left + w * (i - first) / bins

    out = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
           f'<line x1="{left}" x2="{left + w}" y1="{top + h}" y2="{top + h}" stroke="#c9ced6"/>']
    for i in range(first, last + 2):
        d = lo + i * step
        if d == int(d) and (int(d) % max(1, math.ceil(bins * step / 7)) == 0):
            out.append(f'<text x="{x(i):.1f}" y="{top + h + 13}" text-anchor="middle">1e{int(d)}</text>')
    for counts, total, color in ((ce, ne, EAGER), (cc, nc, COMPILED)):
        pts = [f"{x(first):.1f},{top + h}"]
        for i in range(first, last + 1):
            yy = top + h - h * (counts[i] / total) / peak
            pts += [f"{x(i):.1f},{yy:.1f}", f"{x(i + 1):.1f},{yy:.1f}"]
        pts.append(f"{x(last + 1):.1f},{top + h}")
        out.append(f'<polyline fill="{color}" fill-opacity="0.18" stroke="{color}" stroke-width="1.5" '
                   f'points="{" ".join(pts)}"/>')
    out.append(f'<text x="{left}" y="{height - 2}">|error| against the golden (share of elements)</text></svg>')
    return "".join(out)


LEGEND = (f'<p class="legend"><span><i class="sw" style="background:{EAGER}"></i>eager vs golden</span>'
          f'<span><i class="sw" style="background:{COMPILED}"></i>compiled vs golden</span></p>')


# -- check ----------------------------------------------------------------------------------------------
def _row_distribution(data: dict, row: dict) -> dict | None:
    return row.get("distribution") or (data.get("distributions") or {}).get(row.get("name"))


def _row_card(data: dict, row: dict) -> str:
    v = row.get("verdict") or {}
    e, c = row.get("eager_vs_golden") or {}, row.get("vs_golden") or {}
    head = (f'<div class="card"><h3>{_e(row.get("name"))} {_badge(v.get("status", "?"))}</h3>'
            f'<div class="msg"><b>{_e(v.get("code", ""))}</b>: {_e(_phrase(v.get("code", "")) or v.get("message", ""))}'
            f'<br>{_e(row.get("dtype", ""))} {_e(row.get("shape", ""))}; ratio {_g(row.get("error_ratio"))}</div>')
    dist = _row_distribution(data, row)
    if dist:
        qs = list(dist["eager"]["quantiles"])
        labels = ["max" if q == "1" else f"p{float(q) * 100:g}" for q in qs]
        chart = line_chart([("eager", EAGER, [_num(dist["eager"]["quantiles"][q]) for q in qs]),
                            ("compiled", COMPILED, [_num(dist["compiled"]["quantiles"][q]) for q in qs])],
                           labels, y_title="|error| quantiles", height=170)
        chart += histogram_chart(dist["eager"], dist["compiled"])
    elif e or c:
        keys = [("rmse", "rmse"), ("mean rel", "mean_rel"), ("max rel", "max_rel"), ("max abs", "max_abs"),
                ("max ULP", "ulp_max")]
        chart = bar_chart([(label, _num(e.get(k)), _num(c.get(k))) for label, k in keys])
    else:
        chart = f'<p class="msg">{_e(v.get("message", "no error against the golden for this row"))}</p>'
    return head + chart + "</div>"


def _summary_table(rows: list[dict]) -> str:
    out = ['<table><tr><th class="l">output</th><th>dtype</th><th>eager rmse</th><th>compiled rmse</th>'
           '<th>ratio</th><th>eager max rel</th><th>compiled max rel</th><th class="l">verdict</th></tr>']
    for r in rows:
        e, c, v = r.get("eager_vs_golden") or {}, r.get("vs_golden") or {}, r.get("verdict") or {}
        out.append(f'<tr><td class="l">{_e(r.get("name"))}</td><td>{_e(r.get("dtype", ""))}</td>'
                   f'<td>{_g(e.get("rmse"))}</td><td>{_g(c.get("rmse"))}</td><td>{_g(r.get("error_ratio"))}</td>'
                   f'<td>{_g(e.get("max_rel"))}</td><td>{_g(c.get("max_rel"))}</td>'
                   f'<td class="l">{_badge(v.get("status", "?"))} {_e(v.get("code", ""))}</td></tr>')
    out.append("</table>")
    return "".join(out)


def block_curve(blocks: list[dict]) -> str:
    """Per-block error against the golden in model order (the streamed golden's "blocks")."""
    labels = [str(b.get("name", i)) for i, b in enumerate(blocks)]
    marks = [STATUS_COLORS.get(str(b.get("verdict", "")).split(" ")[0], "") for b in blocks]
    chart = line_chart([("eager", EAGER, [_num(b.get("eager_rmse")) for b in blocks]),
                        ("compiled", COMPILED, [_num(b.get("compiled_rmse")) for b in blocks])],
                       labels, width=1100, height=260, y_title="rmse against the golden, block by block",
                       marks=marks)
    worst = max(blocks, key=lambda b: _num(b.get("ratio")) or 0.0)
    return (f"<h2>Error along the model, block by block</h2>{LEGEND}{chart}"
            f'<p class="meta">largest ratio: {_e(worst.get("name"))} ({_g(worst.get("ratio"))}x eager); '
            "x labels coloured by the block's verdict</p>")


def render_check(data: dict) -> str:
    status = data.get("status", "?")
    title = f"fusecheck check: {data.get('case', '')}"
    body = [f"<h1>{_e(title)} {_badge(status)}</h1>"]
    meta = [f"{k} {data[k]}" for k in ("backend", "dtype", "device", "train", "seed") if k in data]
    if data.get("toggles"):
        meta.append("toggles " + ", ".join(map(str, data["toggles"])))
    secs = data.get("seconds") or {}
    if secs:
        meta.append("time " + ", ".join(f"{k} {_num(v) or 0:.1f} s" for k, v in secs.items()))
    body.append(f'<p class="meta">{_e("  ·  ".join(meta))}</p>')
    if data.get("error"):
        body.append(f'<div class="error"><b>No verdict</b> (exit {_e(data.get("exit_code"))}): '
                    f'{_e(data["error"])}</div>')
    rows = data.get("rows") or []
    gate = data.get("gate") or {}
    if gate.get("baseline"):
        body.append(f'<p>gate with the baseline {_e(gate["baseline"])}: exit {_e(gate.get("exit_code"))}; '
                    f'{len(gate.get("new_failures", []))} new, {len(gate.get("known_failures", []))} known, '
                    f'{len(gate.get("fixed", []))} fixed</p>')
    if rows:
        body += ["<h2>Outputs and gradients</h2>", _summary_table(rows)]
    if data.get("blocks"):
        body.append(block_curve(data["blocks"]))
    if data.get("memory"):
        def peak(v):  # {"device_peak_bytes": n} on CUDA, {"host_peak_rss_bytes": n} on the host
            return _num(v.get("device_peak_bytes", v.get("host_peak_rss_bytes"))) if isinstance(v, dict) else _num(v)
        size = _num(data.get("model_bytes"))
        body.append("<h2>Peak memory</h2>" + (f"<p>the model holds {size / 2**30:.2f} GiB</p>" if size else "")
                    + "<table><tr><th class='l'>phase</th><th>peak</th></tr>"
                    + "".join(f"<tr><td class='l'>{_e(k)}</td><td>{(peak(v) or 0) / 2**20:.0f} MiB</td></tr>"
                              for k, v in data["memory"].items()) + "</table>")
    if rows:
        order = sorted(rows, key=lambda r: ((r.get("verdict") or {}).get("status") == "PASS",
                                            -(_num(r.get("error_ratio")) or 0.0)))
        body += ["<h2>Error against the golden, eager and compiled</h2>", LEGEND,
                 '<div class="cards">' + "".join(_row_card(data, r) for r in order) + "</div>"]
    notes = list(data.get("notes") or []) + [f"{r['name']}: {n}" for r in rows for n in r.get("notes") or []]
    if notes:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    if data.get("policy"):
        body.append(f"<details><summary>policy</summary><pre>{_e(json.dumps(data['policy'], indent=1))}</pre></details>")
    for g in data.get("graphs") or []:
        body.append(f"<details><summary>captured graph {_e(g.get('index', ''))} ({_e(g.get('n_nodes', ''))} ops)"
                    f"</summary><pre>{_e(g.get('code', ''))}</pre></details>")
    return _page(title, body)


# -- matrix ---------------------------------------------------------------------------------------------
def _heat(delta: float | None) -> str:
    """Diverging colour for log2(row / reference): blue better, white same, red worse (saturates at 4x)."""
    if delta is None:
        return "#f4f5f7"
    t = max(-1.0, min(1.0, delta / 2))
    if t >= 0:
        return f"rgb(255,{int(255 - 150 * t)},{int(255 - 170 * t)})"
    return f"rgb({int(255 + 160 * t)},{int(255 + 110 * t)},255)"


def render_matrix(data: dict) -> str:
    title = f"fusecheck matrix: {data.get('case', '')}"
    rows = data.get("rows") or []
    by_name = {r["name"]: r for r in rows}

    def rmse(row: dict) -> dict[str, float | None]:
        rep = row.get("report") or {}
        return {x["name"]: _num((x.get("vs_golden") or {}).get("rmse")) for x in rep.get("rows") or []}

    outputs = list(dict.fromkeys(k for r in rows for k in rmse(r)))
    body = [f"<h1>{_e(title)} {_badge({0: 'PASS', 1: 'FAIL'}.get(data.get('exit_code'), 'ERROR'))}</h1>",
            f'<p class="meta">each cell: compiled rmse against the golden; colour: change against the row\'s '
            f'reference (red worse, blue better, saturating at 4x). Moves most: {_e(data.get("moves_most") or "none")}'
            "</p>", '<table><tr><th class="l">row</th><th>kernels</th><th>verdict</th>'
            + "".join(f"<th>{_e(o)}</th>" for o in outputs) + "</tr>"]
    for r in rows:
        if r.get("report") is None:
            body.append(f'<tr><td class="l">{_e(r["name"])}</td><td colspan="{len(outputs) + 2}" class="l" '
                        f'style="color:#7f8c8d">{_e(r.get("skipped") or "")}</td></tr>')
            continue
        ref = rmse(by_name[r["reference"]]) if r.get("reference") in by_name else {}
        cells = []
        for o in outputs:
            v, base = rmse(r).get(o), ref.get(o)
            delta = (math.log2((v + 1e-30) / (base + 1e-30)) if v is not None and base is not None
                     and math.isfinite(v) and math.isfinite(base) else None)
            tip = "" if delta is None else f' title="{delta:+.2f} log2 vs {_e(r["reference"])}"'
            cells.append(f'<td style="background:{_heat(delta)}"{tip}>{_g(v)}</td>')
        mark = " ◀ moves most" if r.get("moves_most") else (" (no effect)" if r.get("no_effect") else "")
        body.append(f'<tr><td class="l">{_e(r["name"])}{_e(mark)}</td><td>{_e(r.get("kernels") or "")}</td>'
                    f'<td>{_badge(r.get("verdict", "?"))}</td>' + "".join(cells) + "</tr>")
    body.append("</table>")
    return _page(title, body)


# -- bisect ---------------------------------------------------------------------------------------------
def _rmse_lines(summary: dict | None) -> str:
    if not summary:
        return ""
    parts = [f"{_e(n)}: {_g(r.get('rmse'))} (eager {_g(r.get('eager_rmse'))}) {_e(r.get('status', ''))}"
             for n, r in (summary.get("rows") or {}).items() if r.get("rmse") is not None]
    return "<br>".join(parts[:6])


def render_bisect(data: dict) -> str:
    title = "fusecheck bisect"
    status = str(data.get("status", "?"))
    body = [f"<h1>{title} {_badge({0: 'PASS', 1: 'FAIL'}.get(data.get('exit_code'), 'ERROR') + ' ' + status)}</h1>",
            f'<p class="meta">{_e(data.get("message", ""))}<br>compiles used {_e(data.get("compiles"))}/'
            f'{_e(data.get("max_compiles"))}, {_num(data.get("seconds")) or 0:.1f} s; decisions counted: '
            + _e(", ".join(f"{k} {v}" for k, v in (data.get("decisions") or {}).items())) + "</p>",
            "<h2>The chain</h2>", '<div class="chain">']
    links = [f'<div class="link"><b>baseline</b> {_badge("FAIL" if data.get("culprits") else status)}'
             f'<div class="msg">{_rmse_lines(data.get("baseline"))}</div></div>']
    for i, c in enumerate(data.get("culprits") or []):
        nodes = ", ".join(map(str, (c.get("fx_nodes") or [])[:6]))
        kernels = ", ".join(map(str, (c.get("kernels") or [])[:3]))
        links.append(f'<div class="link"><b>culprit {i + 1}</b>: {_e(c.get("kind", ""))}'
                     f'{" (partial)" if c.get("partial") else ""}<br><code>{_e(c.get("name", ""))}</code>'
                     f'<div class="msg">FX nodes: {_e(nodes or "-")}<br>kernels: {_e(kernels or "-")}<br>'
                     f'with it: {_rmse_lines(c.get("with"))}<br>held off: {_rmse_lines(c.get("without"))}</div></div>')
    if data.get("final"):
        links.append(f'<div class="link"><b>culprits held off</b>'
                     f'<div class="msg">{_rmse_lines(data.get("final"))}</div></div>')
    body.append('<div class="arrow">→</div>'.join(links) + "</div>")
    kernels = data.get("kernels") or []
    if kernels:
        body.append("<h2>Per-kernel attribution</h2><table><tr><th class='l'>kernel</th><th class='l'>output</th>"
                    "<th>rmse</th><th>eager rmse</th><th>ratio</th><th class='l'>verdict</th></tr>")
        for k in kernels:
            body.append(f"<tr><td class='l'>{_e(k.get('kernel'))}</td><td class='l'>{_e(k.get('output'))}</td>"
                        f"<td>{_g(k.get('rmse'))}</td><td>{_g(k.get('eager_rmse'))}</td><td>{_g(k.get('ratio'))}</td>"
                        f"<td class='l'>{_badge(k.get('status', '?'))}</td></tr>")
        body.append("</table>")
    if data.get("log"):
        body.append(f"<details><summary>probe log</summary><pre>{_e(chr(10).join(data['log']))}</pre></details>")
    return _page(title, body)


# -- dist -----------------------------------------------------------------------------------------------
def render_dist(data: dict) -> str:
    title = f"fusecheck dist: {data.get('spec', '')}"
    world = int(data.get("world_size") or 0)
    layers = data.get("layers") or {}
    body = [f"<h1>{_e(title)} {_badge(data.get('status', '?'))}</h1>",
            f'<p class="meta">{_e(data.get("collective", ""))}, world {world}, {_e(data.get("backend", ""))}, '
            f'{_e(data.get("dtype", ""))}, repeat {_e(data.get("repeat", ""))}'
            f'{", stress" if data.get("stress") else ""}, {_num(data.get("elapsed_s")) or 0:.2f} s</p>',
            "<h2>Verdicts per layer and rank</h2>",
            '<p class="meta">each cell: failed runs / runs of that rank in that layer</p>',
            "<table><tr><th class='l'>layer</th><th>verdict</th>"
            + "".join(f"<th>rank {r}</th>" for r in range(world)) + "</tr>"]
    for name, layer in layers.items():
        cells = []
        for r in range(world):
            results = [run["ranks"][str(r)] for run in layer.get("runs") or [] if str(r) in run.get("ranks", {})]
            failed = [x for x in results if not x.get("passed")]
            color = STATUS_COLORS["FAIL"] if failed else (STATUS_COLORS["PASS"] if results else "#bdc3c7")
            tip = ((failed[0].get("comparison") or {}).get("verdict") or {}).get("message", "") if failed else ""
            cells.append(f'<td style="background:{color};color:#fff" title="{_e(tip)}">'
                         f'{len(failed)}/{len(results)}</td>')
        body.append(f"<tr><td class='l'>{_e(name)}</td><td>{_badge(layer.get('status', '?'))}</td>"
                    + "".join(cells) + "</tr>")
    body.append("</table>")
    diag = data.get("diagnosis") or {}
    if diag:
        body.append(f"<h2>Diagnosis</h2><p>{_e(diag.get('cause', ''))}</p>")
        if diag.get("findings"):
            body.append(f"<pre>{_e(json.dumps(diag['findings'], indent=1, default=str))}</pre>")
    run = data.get("run") or {}
    if run.get("status") not in (None, "ok"):
        body.append(f'<div class="error">{_e(run.get("status"))}: {_e(run.get("detail", ""))}</div>')
    return _page(title, body)


RENDERERS: dict[str, Callable[[dict], str]] = {
    "check": render_check, "matrix": render_matrix, "bisect": render_bisect, "dist": render_dist,
}


def report_kind(data: Any) -> str | None:
    """Which command wrote this JSON report (what `--json` writes), from its keys; None when none did."""
    if not isinstance(data, dict):
        return None
    if data.get("tool") == "fusecheck dist" or ("layers" in data and "world_size" in data):
        return "dist"
    if "culprits" in data and "max_compiles" in data:
        return "bisect"
    rows = data.get("rows")
    if isinstance(rows, list) and "moves_most" in data:
        return "matrix"
    if "case" in data and (isinstance(rows, list) or data.get("status") == "ERROR"):
        return "check"
    return None


def write_html(kind: str, data: dict, path: str | Path) -> None:
    """Write the page of `kind` (check, matrix, bisect, dist) for the command's JSON report dict."""
    Path(path).write_text(RENDERERS[kind](data), encoding="utf-8")


USAGE = ("usage: python -m fusecheck.report.html [KIND] REPORT.json OUT.html\n"
         "  the HTML page of a report that `fusecheck check|matrix|bisect|dist --json` wrote; KIND (check, matrix, "
         "bisect, dist) is read from the report when left out")


def main(argv: list[str] | None = None) -> int:
    """`python -m fusecheck.report.html [KIND] REPORT.json OUT.html`: 0 written, 2 bad usage or not a report
    (one line), 3 the page could not be written."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0

    def error(message: str) -> int:
        print(f"fusecheck: error: {message}", file=sys.stderr)
        return 2
    if len(argv) == 3 and argv[0] in RENDERERS:
        kind, src, dst = argv
    elif len(argv) == 2 and argv[0] not in RENDERERS:
        kind, (src, dst) = None, argv
    else:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        data = json.loads(Path(src).read_text(encoding="utf-8"))
    except OSError as exc:
        return error(f"{src}: cannot read it ({exc.strerror or exc})")
    except (ValueError, UnicodeDecodeError) as exc:
        return error(f"{src}: not a JSON report ({type(exc).__name__}: {exc})")
    found = report_kind(data)
    if found is None:
        return error(f"{src}: not a report of `fusecheck check|matrix|bisect|dist --json`")
    if kind is not None and kind != found:
        return error(f"{src} is a {found} report, not {kind}: give KIND {found}, or leave KIND out")
    if found == "dist" and "checks" in data:  # several specs in one run: the first spec's grid, as --html does
        if not data["checks"]:
            return error(f"{src}: a dist summary with no check that ran: no grid to draw")
        data = data["checks"][0]
    try:
        write_html(found, data, dst)
    except OSError as exc:
        print(f"fusecheck: error: {dst}: cannot write the page ({exc.strerror or exc})", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":  # python -m fusecheck.report.html [KIND] REPORT.json OUT.html
    sys.exit(main())
