"""What every page shares: colours, escaping, numbers, the verdict badge, names that wrap, the page shell.

Self-contained on purpose (inline CSS, no script, nothing fetched): a page opens from a CI artifact store or
an e-mail attachment."""
from __future__ import annotations

import html
import re
from typing import Any, Iterable

EAGER, COMPILED = "#3b6fb6", "#d9622b"
STATUS_COLORS = {"PASS": "#2e8b57", "FAIL": "#c0392b", "ERROR": "#7f8c8d", "HANG": "#8e44ad", "CRASH": "#8e44ad",
                 "SKIP": "#95a5a6"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1180px;
 color:#1d2330;background:#fafbfc;padding:0 16px}
h1{font-size:22px;margin:0 0 4px;overflow-wrap:anywhere}h2{font-size:17px;margin:28px 0 8px;
 border-bottom:1px solid #dde1e6;padding-bottom:4px}h3{overflow-wrap:anywhere}
.meta{color:#5b6473}.badge{display:inline-block;padding:1px 9px;border-radius:10px;color:#fff;font-weight:600;
 font-size:12px;vertical-align:middle}
table{border-collapse:collapse;background:#fff;max-width:100%}td,th{border:1px solid #e3e6ea;padding:3px 8px;
 text-align:right;font-variant-numeric:tabular-nums}th{background:#f1f3f6;font-weight:600}td.l,th.l{text-align:left}
td.name{text-align:left;overflow-wrap:anywhere;max-width:460px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:12px}
.card{background:#fff;border:1px solid #e3e6ea;border-radius:6px;padding:10px 12px;min-width:0}
.card h3{font-size:14px;margin:0 0 2px}.msg{color:#5b6473;font-size:12px;margin:2px 0 6px;overflow-wrap:anywhere}
.legend span{margin-right:14px}.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px}
.chain{display:flex;flex-wrap:wrap;align-items:stretch;gap:6px}.link{background:#fff;border:1px solid #e3e6ea;
 border-radius:6px;padding:8px 10px;min-width:170px;max-width:340px;overflow-wrap:anywhere}
.arrow{align-self:center;font-size:22px;color:#9aa3af}
.error{background:#fdecea;border:1px solid #f5c6cb;padding:10px;border-radius:6px;white-space:pre-wrap}
.culprit{outline:3px solid #c0392b;outline-offset:-3px;font-weight:700}
.mark{display:inline-block;border:2px solid #c0392b;color:#c0392b;border-radius:4px;padding:0 5px;font-size:11px;
 font-weight:700;margin-left:4px;background:#fff}
details{margin-top:10px}summary{cursor:pointer}pre{white-space:pre-wrap;font-size:12px;background:#fff;
 border:1px solid #e3e6ea;padding:8px;overflow-wrap:anywhere}
svg.chart{max-width:100%;height:auto;display:block;margin-top:4px}svg text{font:11px system-ui,sans-serif;fill:#5b6473}svg text.axis-title{fill:#1d2330;font-weight:600}
"""


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def num(x: Any) -> float | None:
    """JSON numbers, and inf/nan that the JSON writer stored as strings."""
    if isinstance(x, bool) or x is None:
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def g3(x: Any) -> str:
    v = num(x)
    return "-" if v is None else f"{v:.3g}"


def badge(status: str) -> str:
    word = str(status).split(" ")[0]
    return f'<span class="badge" style="background:{STATUS_COLORS.get(word, "#7f8c8d")}">{esc(status)}</span>'


def phrase(code: str) -> str:
    from fusecheck.report.table import CODE_PHRASES
    return CODE_PHRASES.get(code, "")


def name_html(name: Any) -> str:
    """A row name whole, with break opportunities after `.`, `/` and `_` so that it wraps inside its card or
    cell instead of overflowing it (the text, copied, is the name unchanged)."""
    return re.sub(r"([./_])", r"\1<wbr>", esc(name))


def fitted_names(names: list[str], room: int = 44) -> tuple[dict[str, str], str]:
    """name -> its card title: the start many names share written `…` (the tables' rule, unique as the names
    are), said once on the page; the whole name stays in the summary table and the title's tooltip."""
    from fusecheck.report.table import fit_names
    shown, start = fit_names(list(names), room)
    return dict(zip(names, shown)), start


def page(title: str, body: Iterable[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{esc(title)}</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


LEGEND = (f'<p class="legend"><span><i class="sw" style="background:{EAGER}"></i>eager vs golden</span>'
          f'<span><i class="sw" style="background:{COMPILED}"></i>compiled vs golden</span></p>')
