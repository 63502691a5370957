"""The dist page: per spec the layer x rank grid (the ranks a HANG/CRASH names are marked, never coloured as
passing), the diagnosis as sentences, each rank's error; for a folder of specs one page, a summary first."""
from __future__ import annotations

from fusecheck.report.html.page import STATUS_COLORS, badge, esc, name_html, num, page

IDLE = "#bdc3c7"


def _grid(data: dict, culprits: set[int], status: str) -> str:
    world = int(data.get("world_size") or 0)
    word = status if status in ("HANG", "CRASH") else "FAIL"
    head = "".join(f"<th>rank {r}"
                   + (f'<span class="mark">{esc(word)}</span>' if r in culprits else "") + "</th>"
                   for r in range(world))
    out = ['<p class="meta">each cell: failed runs / runs of that rank in that layer; a marked rank is the one '
           "the run stopped on</p>", f"<table class='grid'><tr><th class='l'>layer</th><th>verdict</th>{head}</tr>"]
    for name, layer in (data.get("layers") or {}).items():
        cells = []
        for r in range(world):
            results = [run["ranks"][str(r)] for run in layer.get("runs") or [] if str(r) in run.get("ranks", {})]
            failed = [x for x in results if not x.get("passed")]
            tip = ((failed[0].get("comparison") or {}).get("verdict") or {}).get("message", "") if failed else ""
            if r in culprits:
                color, text, cls = STATUS_COLORS.get(word, STATUS_COLORS["FAIL"]), f"✖ {word}", ' class="culprit"'
                tip = tip or f"rank {r}: {word}"
            else:
                color = STATUS_COLORS["FAIL"] if failed else (STATUS_COLORS["PASS"] if results else IDLE)
                text, cls = f"{len(failed)}/{len(results)}", ""
            cells.append(f'<td{cls} style="background:{color};color:#fff" title="{esc(tip)}">{text}</td>')
        out.append(f"<tr><td class='l'>{esc(name)}</td><td>{badge(layer.get('status', '?'))}</td>"
                   + "".join(cells) + "</tr>")
    out.append("</table>")
    return "".join(out)


def _diagnosis(data: dict) -> str:
    diag = data.get("diagnosis") or {}
    out = []
    if diag:
        out.append(f"<h3>Diagnosis</h3><p><b>{esc(diag.get('cause', ''))}</b></p>")
        findings = diag.get("findings") or []
        if findings:
            out.append("<ul class='findings'>" + "".join(
                f"<li><b>{esc(f.get('cause', ''))}</b>"
                + (f" (layer {esc(f.get('layer'))})" if f.get("layer") else "")
                + (f": {esc(f.get('evidence'))}" if f.get("evidence") else "") + "</li>"
                for f in findings if isinstance(f, dict)) + "</ul>")
    run = data.get("run") or {}
    if run.get("status") not in (None, "ok"):
        out.append(f'<div class="error">{esc(run.get("status"))}: {esc(run.get("detail", ""))}'
                   + (f"<br>{esc(run.get('reason'))}" if run.get("reason") else "") + "</div>")
        for rank, err in sorted((run.get("errors") or {}).items()):
            out.append(f"<details><summary>rank {esc(rank)}: {esc(err.get('type', ''))}: {esc(err.get('message', ''))}"
                       f"</summary><pre>{esc(err.get('traceback', ''))}</pre></details>")
    if data.get("caveats"):
        out.append("<ul class='caveats'>" + "".join(f"<li>{esc(c)}</li>" for c in data["caveats"]) + "</ul>")
    return "".join(out)


def dist_section(data: dict, level: int = 1) -> list[str]:
    status = str(data.get("status", "?"))
    run = data.get("run") or {}
    culprits = {int(r) for r in run.get("ranks") or [] if str(r).isdigit()} if status in ("HANG", "CRASH") else set()
    h = f"h{level}"
    return [f"<{h} id=\"{esc(data.get('spec', ''))}\">fusecheck dist: {name_html(data.get('spec', ''))} {badge(status)}</{h}>",
            f'<p class="meta">{esc(data.get("collective", ""))}, world {esc(data.get("world_size", ""))}, '
            f'{esc(data.get("backend", ""))}, {esc(data.get("dtype", ""))}, repeat {esc(data.get("repeat", ""))}'
            f'{", stress" if data.get("stress") else ""}, {num(data.get("elapsed_s")) or 0:.2f} s</p>',
            _grid(data, culprits, status), _diagnosis(data)]


def _summary(data: dict) -> str:
    rows = data.get("summary") or []
    out = ["<table class='summary'><tr><th class='l' style='min-width:320px'>spec</th><th>verdict</th><th>comm</th><th>compute</th>"
           "<th>whole</th><th>s</th><th class='l'>cause</th></tr>"]
    for r in rows:
        layers = r.get("layers") or {}
        out.append(f"<tr><td class='name'><a href=\"#{esc(r.get('spec'))}\">{name_html(r.get('spec'))}</a></td>"
                   f"<td>{badge(r.get('status', '?'))}</td>"
                   + "".join(f"<td>{esc(layers.get(n, '-'))}</td>" for n in ("comm", "compute", "whole"))
                   + f"<td>{num(r.get('elapsed_s')) or 0:.1f}</td><td class='l'>{esc(r.get('cause', ''))}</td></tr>")
    out.append("</table>")
    return "".join(out)


def render_dist(data: dict) -> str:
    """One spec's page, or (a report with `summary` and `checks`) one page for every spec of the run."""
    if "summary" in data and "checks" in data:
        title = f"fusecheck dist: {len(data['summary'])} specs"
        body = [f"<h1>{esc(title)} {badge(data.get('status', '?'))}</h1>", "<h2>Summary</h2>", _summary(data)]
        for check in data["checks"]:
            body += ["<hr>", *dist_section(check, level=2)]
        return page(title, body)
    return page(f"fusecheck dist: {data.get('spec', '')}", dist_section(data))
