"""The matrix page: the toggle matrix as a heat map (log2 of each output's rmse against the reference row)."""
from __future__ import annotations

import math

from fusecheck.report.html.page import badge, esc, g3, name_html, num, page


def heat(delta: float | None) -> str:
    """Diverging colour for log2(row / reference): blue better, white same, red worse (saturates at 4x)."""
    if delta is None:
        return "#f4f5f7"
    t = max(-1.0, min(1.0, delta / 2))
    if t >= 0:
        return f"rgb(255,{int(255 - 150 * t)},{int(255 - 170 * t)})"
    return f"rgb({int(255 + 160 * t)},{int(255 + 110 * t)},255)"


def _scale() -> str:
    """The colour key: the heat map's axis (0.25x ... 4x of the reference row's rmse)."""
    stops = [-2, -1, 0, 1, 2]
    return ('<p class="meta">colour scale (compiled rmse ÷ the reference row\'s): '
            + " ".join(f'<span style="background:{heat(s)};padding:1px 8px;border:1px solid #e3e6ea">'
                       f'{2.0 ** s:g}×</span>' for s in stops) + "</p>")


def render_matrix(data: dict) -> str:
    title = f"fusecheck matrix: {data.get('case', '')}"
    rows = data.get("rows") or []
    by_name = {r["name"]: r for r in rows}

    def rmse(row: dict) -> dict[str, float | None]:
        rep = row.get("report") or {}
        return {x["name"]: num((x.get("vs_golden") or {}).get("rmse")) for x in rep.get("rows") or []}

    outputs = list(dict.fromkeys(k for r in rows for k in rmse(r)))
    body = [f"<h1>{esc(title)} {badge({0: 'PASS', 1: 'FAIL'}.get(data.get('exit_code'), 'ERROR'))}</h1>",
            f'<p class="meta">each cell: compiled rmse against the golden; colour: change against the row\'s '
            f'reference (red worse, blue better, saturating at 4x). Moves most: {esc(data.get("moves_most") or "none")}'
            "</p>", _scale(), '<table><tr><th class="l">row</th><th>kernels</th><th>verdict</th>'
            + "".join(f'<th class="name">{name_html(o)}</th>' for o in outputs) + "</tr>"]
    for r in rows:
        if r.get("report") is None:
            body.append(f'<tr><td class="name">{name_html(r["name"])}</td><td colspan="{len(outputs) + 2}" class="l" '
                        f'style="color:#7f8c8d">{esc(r.get("skipped") or "")}</td></tr>')
            continue
        ref = rmse(by_name[r["reference"]]) if r.get("reference") in by_name else {}
        cells = []
        for o in outputs:
            v, base = rmse(r).get(o), ref.get(o)
            delta = (math.log2((v + 1e-30) / (base + 1e-30)) if v is not None and base is not None
                     and math.isfinite(v) and math.isfinite(base) else None)
            tip = "" if delta is None else f' title="{delta:+.2f} log2 vs {esc(r["reference"])}"'
            cells.append(f'<td style="background:{heat(delta)}"{tip}>{g3(v)}</td>')
        mark = " ◀ moves most" if r.get("moves_most") else (" (no effect)" if r.get("no_effect") else "")
        body.append(f'<tr><td class="name">{name_html(r["name"])}{esc(mark)}</td><td>{esc(r.get("kernels") or "")}'
                    f'</td><td>{badge(r.get("verdict", "?"))}</td>' + "".join(cells) + "</tr>")
    body.append("</table>")
    return page(title, body)
