"""The bisect page: the chain from the failing baseline through each culprit to the run with them held off,
then the per-kernel attribution, the kernels each culprit landed in marked (not merely coloured)."""
from __future__ import annotations

from fusecheck.report.html.page import badge, esc, g3, name_html, num, page


def _rmse_lines(summary: dict | None) -> str:
    if not summary:
        return ""
    parts = [f"{name_html(n)}: {g3(r.get('rmse'))} (eager {g3(r.get('eager_rmse'))}) {esc(r.get('status', ''))}"
             for n, r in (summary.get("rows") or {}).items() if r.get("rmse") is not None]
    return "<br>".join(parts[:6])


def _kernel_table(kernels: list[dict]) -> str:
    out = ["<h2>Per-kernel attribution</h2>",
           '<p class="meta">each kernel re-compiled from its FX subgraph and judged against it (eager dtype and '
           "fp64); a kernel marked <span class=\"mark\">culprit N</span> holds FX nodes of culprit N: judged "
           "against the graph as the culprit rewrote it, it may match it, the culprit's effect is in the chain "
           "above</p>",
           "<table><tr><th class='l'>culprit</th><th class='l'>kernel</th><th class='l'>FX nodes</th>"
           "<th class='l'>output</th><th>rmse</th><th>eager rmse</th><th>ratio</th><th class='l'>verdict</th></tr>"]
    for k in kernels:
        held = str(k.get("culprit") or "")
        mark = "".join(f'<span class="mark">culprit {esc(c)}</span>' for c in held.split(",") if c)
        row_class = ' class="culprit"' if held else ""
        out.append(f"<tr{row_class}><td class='l'>{mark or '-'}</td>"
                   f"<td class='name'>{name_html(k.get('kernel'))}</td>"
                   f"<td class='name'>{name_html(', '.join(map(str, k.get('fx_nodes') or [])))}</td>"
                   f"<td class='name'>{name_html(k.get('output'))}</td><td>{g3(k.get('rmse'))}</td>"
                   f"<td>{g3(k.get('eager_rmse'))}</td><td>{g3(k.get('ratio'))}</td>"
                   f"<td class='l'>{badge(k.get('status', '?'))} {esc(k.get('code', ''))}</td></tr>")
    out.append("</table>")
    return "".join(out)


def render_bisect(data: dict) -> str:
    title = "fusecheck bisect"
    status = str(data.get("status", "?"))
    body = [f"<h1>{title} {badge({0: 'PASS', 1: 'FAIL'}.get(data.get('exit_code'), 'ERROR') + ' ' + status)}</h1>",
            f'<p class="meta">{esc(data.get("message", ""))}<br>compiles used {esc(data.get("compiles"))}/'
            f'{esc(data.get("max_compiles"))}, {num(data.get("seconds")) or 0:.1f} s; decisions counted: '
            + esc(", ".join(f"{k} {v}" for k, v in (data.get("decisions") or {}).items())) + "</p>",
            "<h2>The chain</h2>", '<div class="chain">']
    links = [f'<div class="link"><b>baseline</b> {badge("FAIL" if data.get("culprits") else status)}'
             f'<div class="msg">{_rmse_lines(data.get("baseline"))}</div></div>']
    for i, c in enumerate(data.get("culprits") or []):
        nodes = ", ".join(map(str, (c.get("fx_nodes") or [])[:6]))
        kernels = ", ".join(map(str, (c.get("kernels") or [])[:4]))
        links.append(f'<div class="link"><b>culprit {i + 1}</b>: {esc(c.get("kind", ""))}'
                     f'{" (partial)" if c.get("partial") else ""}<br><code>{name_html(c.get("name", ""))}</code>'
                     f'<div class="msg">FX nodes: {name_html(nodes or "-")}<br>kernels: {name_html(kernels or "-")}'
                     f'<br>with it: {_rmse_lines(c.get("with"))}<br>held off: {_rmse_lines(c.get("without"))}</div></div>')
    if data.get("final"):
        links.append(f'<div class="link"><b>culprits held off</b>'
                     f'<div class="msg">{_rmse_lines(data.get("final"))}</div></div>')
    body.append('<div class="arrow">→</div>'.join(links) + "</div>")
    if data.get("kernels"):
        body.append(_kernel_table(data["kernels"]))
    if data.get("log"):
        body.append(f"<details><summary>probe log</summary><pre>{esc(chr(10).join(data['log']))}</pre></details>")
    return page(title, body)
