"""The check page: verdict, summary, per-block curve, one card per output and gradient.

Everything drawn is in the JSON report: per row the metrics against the golden and `octaves` (the verdict's
per-|golden|-octave counts and largest errors), `blocks` for the per-block curve, `memory`. At model scale
(more than `CARD_LIMIT` rows) the page is a summary by block and by parameter kind, worst first, the worst
rows as cards and every other row in a collapsed table per block: hundreds of equal cards read as nothing."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from fusecheck.report.html.charts import histogram_chart, line_chart, octave_chart, ratio_chart
from fusecheck.report.html.page import (COMPILED, EAGER, LEGEND, STATUS_COLORS, badge, esc, fitted_names, g3,
                                        name_html, num, page, phrase)

CARD_LIMIT = 24   # more rows than this: the model-scale summary, cards for the worst only
WORST_CARDS = 12
METRICS = [("rmse", "rmse"), ("mean rel", "mean_rel"), ("max rel", "max_rel"), ("max abs", "max_abs"),
           ("max ULP", "ulp_max"), ("scale error", "scale_error"),
           ("offset error", "offset_error")]


def _status(row: dict) -> str:
    return str((row.get("verdict") or {}).get("status", "?"))


def _ratio(row: dict) -> float:
    v = num(row.get("error_ratio"))
    return -1.0 if v is None or v != v else v


def worst_first(rows: list[dict]) -> list[dict]:
    """Failing rows first, then by compiled ÷ eager rmse, largest first."""
    return sorted(rows, key=lambda r: (_status(r) == "PASS", -_ratio(r)))


# -- grouping at model scale ---------------------------------------------------------------------------------
_NUMBERED = re.compile(r"^((?:[^.\[]+\.)*?[^.\[]+\.\d+)(?:\.|$)")


def block_of(name: str, blocks: list[str]) -> tuple[str, str]:
    """(block, parameter kind) of a row name: the report's block whose dotted name the row holds (longest
    first), else the first numbered module (`model.layers.3`); the kind is what follows (`mlp.up.weight`),
    or the last part of the name outside any block."""
    bare = name[5:] if name.startswith("grad.") else name
    for b in sorted(blocks, key=len, reverse=True):
        if bare == b or bare.startswith(b + "."):
            return b, bare[len(b) + 1:] or "(the block's output)"
    m = _NUMBERED.match(bare)
    if m:
        return m.group(1), bare[m.end():] or "(the block's output)"
    return "(outside the blocks)", bare.rsplit(".", 1)[-1]


@dataclass
class Group:
    name: str
    rows: list[dict] = field(default_factory=list)

    @property
    def failing(self) -> int:
        return sum(_status(r) != "PASS" for r in self.rows)

    @property
    def worst(self) -> dict:
        return worst_first(self.rows)[0]


def groups(rows: list[dict], blocks: list[str], by: int) -> list[Group]:
    """Rows grouped by block (by=0) or by parameter kind (by=1), worst group first."""
    out: dict[str, Group] = {}
    for r in rows:
        key = block_of(str(r.get("name")), blocks)[by]
        out.setdefault(key, Group(key)).rows.append(r)
    return sorted(out.values(), key=lambda g: (-g.failing, -_ratio(g.worst)))


def group_table(title: str, gs: list[Group]) -> str:
    out = [f'<table class="groups"><tr><th class="l">{esc(title)}</th><th>rows</th><th>failing</th>'
           '<th>worst ratio</th><th class="l">worst row</th><th class="l">its verdict</th></tr>']
    for g in gs:
        w = g.worst
        out.append(f'<tr><td class="name">{name_html(g.name)}</td><td>{len(g.rows)}</td>'
                   f'<td>{g.failing}</td><td>{g3(w.get("error_ratio"))}</td>'
                   f'<td class="name">{name_html(w.get("name"))}</td>'
                   f'<td class="l">{badge(_status(w))} {esc((w.get("verdict") or {}).get("code", ""))}</td></tr>')
    out.append("</table>")
    return "".join(out)


# -- tables and cards ------------------------------------------------------------------------------------------
def summary_table(rows: list[dict]) -> str:
    out = ['<table class="rows"><tr><th class="l">output</th><th>dtype</th><th>eager rmse</th><th>compiled rmse</th>'
           '<th>ratio</th><th>eager max rel</th><th>compiled max rel</th><th class="l">verdict</th></tr>']
    for r in rows:
        e, c, v = r.get("eager_vs_golden") or {}, r.get("vs_golden") or {}, r.get("verdict") or {}
        out.append(f'<tr><td class="name">{name_html(r.get("name"))}</td><td>{esc(r.get("dtype", ""))}</td>'
                   f'<td>{g3(e.get("rmse"))}</td><td>{g3(c.get("rmse"))}</td><td>{g3(r.get("error_ratio"))}</td>'
                   f'<td>{g3(e.get("max_rel"))}</td><td>{g3(c.get("max_rel"))}</td>'
                   f'<td class="l">{badge(v.get("status", "?"))} {esc(v.get("code", ""))}</td></tr>')
    out.append("</table>")
    return "".join(out)


def row_card(row: dict, shown: str) -> str:
    v = row.get("verdict") or {}
    e, c = row.get("eager_vs_golden") or {}, row.get("vs_golden") or {}
    head = (f'<div class="card"><h3 title="{esc(row.get("name"))}">{name_html(shown)} '
            f'{badge(v.get("status", "?"))}</h3><div class="msg"><b>{esc(v.get("code", ""))}</b>: '
            f'{esc(phrase(v.get("code", "")) or v.get("message", ""))}<br>{esc(row.get("dtype", ""))} '
            f'{esc(row.get("shape", ""))}; rmse ratio {g3(row.get("error_ratio"))}</div>')
    charts = []
    if e or c:
        charts.append(ratio_chart([(label, num(e.get(k)), num(c.get(k))) for label, k in METRICS]))
    if row.get("octaves"):
        charts.append(octave_chart(row["octaves"]))
    dist = row.get("distribution")
    if dist:
        charts.append(histogram_chart(dist["eager"], dist["compiled"]))
    if not charts:
        charts.append(f'<p class="msg">{esc(v.get("message", "no error against the golden for this row"))}</p>')
    return head + "".join(charts) + "</div>"


def cards(rows: list[dict]) -> str:
    shown, start = fitted_names([str(r.get("name")) for r in rows])
    note = (f'<p class="meta">card titles: … stands for <code>{esc(start)}</code> (hover a title for the whole '
            "name)</p>") if start else ""
    return note + '<div class="cards">' + "".join(row_card(r, shown[str(r.get("name"))]) for r in rows) + "</div>"


def block_curve(blocks: list[dict]) -> str:
    """Per-block error against the golden in model order (the streamed golden's "blocks")."""
    labels = [str(b.get("name", i)) for i, b in enumerate(blocks)]
    marks = [STATUS_COLORS.get(str(b.get("verdict", "")).split(" ")[0], "") for b in blocks]
    compiled = [num(b.get("compiled_rmse")) for b in blocks]
    chart = line_chart([("eager", EAGER, [num(b.get("eager_rmse")) for b in blocks]),
                        ("compiled", COMPILED, compiled)],
                       labels, width=1100, height=280, y_title="rmse vs golden", x_title="block, in model order",
                       marks=marks, kind="blocks")
    judged = [b for b in blocks if num(b.get("ratio")) is not None]
    if judged:
        worst = max(judged, key=lambda b: num(b.get("ratio")) or 0.0)
        said = (f"largest ratio: {esc(worst.get('name'))} ({g3(worst.get('ratio'))}x eager); x labels coloured "
                "by the block's verdict")
    else:
        said = "eager's error per block only: compiled blocks are observable one by one with --regional"
    return f"<h2>Error along the model, block by block</h2>{LEGEND}{chart}<p class=\"meta\">{said}</p>"


def _memory(data: dict) -> str:
    def peak(v):  # {"device_peak_bytes": n} on CUDA, {"host_peak_rss_bytes": n} on the host
        return num(v.get("device_peak_bytes", v.get("host_peak_rss_bytes"))) if isinstance(v, dict) else num(v)
    size = num(data.get("model_bytes"))
    return ("<h2>Peak memory</h2>" + (f"<p>the model holds {size / 2**30:.2f} GiB</p>" if size else "")
            + "<table><tr><th class='l'>phase</th><th>peak</th></tr>"
            + "".join(f"<tr><td class='l'>{esc(k)}</td><td>{(peak(v) or 0) / 2**20:.0f} MiB</td></tr>"
                      for k, v in data["memory"].items()) + "</table>")


def _headline(rows: list[dict]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[_status(r)] = counts.get(_status(r), 0) + 1
    w = worst_first(rows)[0]
    return (f'<p class="summary">{len(rows)} rows: ' + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            + f'; worst: <b>{name_html(w.get("name"))}</b> {badge(_status(w))} (rmse {g3(w.get("error_ratio"))}x '
            "eager's)</p>")


def rows_section(data: dict, rows: list[dict]) -> list[str]:
    if len(rows) <= CARD_LIMIT:
        return ["<h2>Outputs and gradients</h2>", _headline(rows), summary_table(rows)]
    names = [str(b.get("name")) for b in data.get("blocks") or []]
    by_block = groups(rows, names, 0)
    return (["<h2>Outputs and gradients</h2>", _headline(rows),
            "<h3>By block (worst first)</h3>", group_table("block", by_block),
            "<h3>By parameter kind, across blocks (worst first)</h3>", group_table("kind", groups(rows, names, 1)),
            f"<h3>The {min(WORST_CARDS, len(rows))} worst rows</h3>", summary_table(worst_first(rows)[:WORST_CARDS]),
            "<h3>Every row, by block</h3>"]
            + [f'<details><summary>{name_html(g.name)}: {len(g.rows)} rows, {g.failing} failing, worst ratio '
               f'{g3(g.worst.get("error_ratio"))}</summary>{summary_table(worst_first(g.rows))}</details>'
               for g in by_block])


def render_check(data: dict) -> str:
    status = data.get("status", "?")
    title = f"fusecheck check: {data.get('case', '')}"
    body = [f"<h1>{esc(title)} {badge(status)}</h1>"]
    meta = [f"{k} {data[k]}" for k in ("backend", "dtype", "device", "train", "seed") if k in data]
    if data.get("toggles"):
        meta.append("toggles " + ", ".join(map(str, data["toggles"])))
    secs = data.get("seconds") or {}
    if secs:
        meta.append("time " + ", ".join(f"{k} {num(v) or 0:.1f} s" for k, v in secs.items()))
    body.append(f'<p class="meta">{esc("  ·  ".join(meta))}</p>')
    if data.get("error"):
        body.append(f'<div class="error"><b>No verdict</b> (exit {esc(data.get("exit_code"))}): '
                    f'{esc(data["error"])}</div>')
    rows = data.get("rows") or []
    gate = data.get("gate") or {}
    if gate.get("baseline"):
        body.append(f'<p>gate with the baseline {esc(gate["baseline"])}: exit {esc(gate.get("exit_code"))}; '
                    f'{len(gate.get("new_failures", []))} new, {len(gate.get("known_failures", []))} known, '
                    f'{len(gate.get("fixed", []))} fixed</p>')
    if rows:
        body += rows_section(data, rows)
    if data.get("blocks"):
        body.append(block_curve(data["blocks"]))
    if data.get("memory"):
        body.append(_memory(data))
    if rows:
        shown = worst_first(rows)[:WORST_CARDS] if len(rows) > CARD_LIMIT else worst_first(rows)
        body += [f"<h2>Error against the golden, eager and compiled{' (the worst rows)' if len(shown) < len(rows) else ''}"
                 "</h2>", LEGEND, '<p class="meta">per card: each metric as compiled ÷ eager on a log axis; then '
                 "per binary octave of |golden| (grey bars: elements there) the largest error relative to the "
                 "octave, the data the max-rel verdict judges</p>", cards(shown)]
    notes = list(data.get("notes") or []) + [f"{r['name']}: {n}" for r in rows for n in r.get("notes") or []]
    if notes:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    if data.get("policy"):
        body.append(f"<details><summary>policy</summary><pre>{esc(json.dumps(data['policy'], indent=1))}</pre></details>")
    for gr in data.get("graphs") or []:
        body.append(f"<details><summary>captured graph {esc(gr.get('index', ''))} ({esc(gr.get('n_nodes', ''))} ops)"
                    f"</summary><pre>{esc(gr.get('code', ''))}</pre></details>")
    return page(title, body)
