"""`fusecheck train --html`: one self-contained page from the train JSON (inline SVG drawn from the data).

The three loss curves (eager, compiled, the fp64 shadow, with the band's range shaded) on a linear axis, as
losses may be negative; the drift (distance to the shadow) and the drift ratio per step on the shared log
charts of fusecheck/report/html.py; the steps where compiled left the band are marked red on the x axis.
"""
from __future__ import annotations

import math
from pathlib import Path

from fusecheck.report.html import COMPILED, EAGER, STATUS_COLORS, _badge, _e, _g, _num, _page, line_chart

SHADOW, BAND = "#2e8b57", "#9aa3af"


def loss_chart(series: list[dict], *, width: int = 1100, height: int = 280) -> str:
    """Eager's, compiled's and the shadow's loss per step; the band's [min, max] as a grey area."""
    left, right, top, bottom = 64, 20, 10, 34
    w, h = width - left - right, height - top - bottom
    lines = {"eager": EAGER, "compiled": COMPILED, "shadow": SHADOW}
    vals = [_num(s["losses"].get(k)) for s in series for k in (*lines, "band_min", "band_max")]
    vals = [v for v in vals if v is not None and math.isfinite(v)]
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    n = max(1, len(series) - 1)

    def x(i: int) -> float:
        return left + (w * i / n if len(series) > 1 else w / 2)

    def y(v: float) -> float:
        return top + h * (hi - v) / (hi - lo)

    out = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eceff3"/>'
                   f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.4g}</text>')
    every = max(1, math.ceil(len(series) / 20))
    for i, s in enumerate(series):
        if i % every == 0 or i == len(series) - 1 or s.get("status") == "FAIL":
            color = f' style="fill:{STATUS_COLORS["FAIL"]}"' if s.get("status") == "FAIL" else ""
            out.append(f'<text x="{x(i):.1f}" y="{top + h + 14}" text-anchor="middle"{color}>{s["step"]}</text>')
    band = [(i, _num(s["losses"].get("band_min")), _num(s["losses"].get("band_max"))) for i, s in enumerate(series)]
    band = [(i, a, b) for i, a, b in band if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]
    if band:
        pts = [f"{x(i):.1f},{y(b):.1f}" for i, _, b in band] + [f"{x(i):.1f},{y(a):.1f}" for i, a, _ in reversed(band)]
        out.append(f'<polygon points="{" ".join(pts)}" fill="{BAND}" fill-opacity="0.35" stroke="none"/>')
    for name, color in lines.items():
        pts = [(i, _num(s["losses"].get(name))) for i, s in enumerate(series)]
        pts = [f"{x(i):.1f},{y(v):.1f}" for i, v in pts if v is not None and math.isfinite(v)]
        if pts:
            dash = ' stroke-dasharray="5,3"' if name == "shadow" else ""
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{" ".join(pts)}">'
                       f"<title>{_e(name)}</title></polyline>")
    out.append(f'<text x="{left}" y="{height - 4}">loss per step</text></svg>')
    return "".join(out)


def _legend(items: list[tuple[str, str]]) -> str:
    return '<p class="legend">' + "".join(f'<span><i class="sw" style="background:{c}"></i>{_e(t)}</span>'
                                          for t, c in items) + "</p>"


def render_train(data: dict) -> str:
    title = f"fusecheck train: {data.get('case', '')}"
    body = [f"<h1>{_e(title)} {_badge(data.get('status', '?'))}</h1>"]
    meta = [f"{k} {data[k]}" for k in ("backend", "dtype", "device", "golden_device", "optimizer", "lr", "steps",
                                       "seed", "band_runs") if k in data]
    body.append(f'<p class="meta">{_e("  ·  ".join(meta))}</p>')
    if data.get("error"):
        body.append(f'<div class="error"><b>No verdict</b> (exit {_e(data.get("exit_code"))}): '
                    f'{_e(data["error"])}</div>')
        return _page(title, body)
    series = data.get("series") or []
    first = data.get("first_failed_step")
    if first is not None:
        body.append(f"<p>compiled left eager's band at step <b>{_e(first)}</b> on: "
                    f"{_e(', '.join(data.get('left_band') or []))}</p>")
    else:
        body.append("<p>compiled stayed within eager's band at every step</p>")
    if series:
        labels = [str(s["step"]) for s in series]
        marks = [STATUS_COLORS["FAIL"] if s.get("status") == "FAIL" else "" for s in series]
        body += ["<h2>Loss</h2>", _legend([("eager", EAGER), ("compiled", COMPILED), ("fp64 shadow", SHADOW),
                                           ("band (randomised-rounding eager runs)", BAND)]), loss_chart(series)]
        drift = line_chart([(w, c, [_num(s["distance"].get(w)) for s in series])
                            for w, c in (("eager", EAGER), ("compiled", COMPILED), ("band", BAND))],
                           labels, width=1100, height=260, marks=marks,
                           y_title="relative L2 distance of all parameters to the fp64 shadow")
        ratio = line_chart([("compiled / band", COMPILED, [_num(s["ratio"].get("to_band")) for s in series]),
                            ("compiled / eager", EAGER, [_num(s["ratio"].get("to_eager")) for s in series])],
                           labels, width=1100, height=220, marks=marks, y_title="drift ratio per step")
        body += ["<h2>Drift to the shadow</h2>", _legend([("eager", EAGER), ("compiled", COMPILED),
                                                         ("band (largest)", BAND)]), drift,
                 "<h2>Drift ratio</h2>", _legend([("compiled / band", COMPILED), ("compiled / eager", EAGER)]), ratio]
        last = series[-1]
        for by in ("by_block", "by_kind"):
            groups = last.get(by) or {}
            if groups:
                body.append(f"<h2>Drift at the last step, {by.replace('_', ' ')}</h2><table><tr><th class='l'>group"
                            "</th><th>eager</th><th>compiled</th><th>band</th></tr>" + "".join(
                                f"<tr><td class='l'>{_e(g)}</td><td>{_g(v.get('eager'))}</td>"
                                f"<td>{_g(v.get('compiled'))}</td><td>{_g(v.get('band'))}</td></tr>"
                                for g, v in groups.items()) + "</table>")
    rows = data.get("rows_at_first_failure") or []
    failed = [r for r in rows if (r.get("verdict") or {}).get("status") != "PASS"]
    if failed:
        body.append(f"<h2>What left the band at step {_e(first)}</h2><ul>" + "".join(
            f"<li><b>{_e(r.get('name'))}</b>: {_e((r.get('verdict') or {}).get('message', ''))}</li>"
            for r in failed) + "</ul>")
    if data.get("notes"):
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in data["notes"]) + "</ul>")
    return _page(title, body)


def write_train_html(data: dict, path: str | Path) -> None:
    Path(path).write_text(render_train(data), encoding="utf-8")
