"""`--html FILE`: one self-contained page (inline CSS and SVG, no script, no network) per command.

Each renderer takes the command's JSON report dict (what `--json` writes) and draws only what it holds, so a
page can also be made later from a saved JSON: `python -m fusecheck.report.html [KIND] r.json r.html`.
One module per job: page.py (shell, colours, names), charts.py (SVG with axes), check.py, matrix.py,
bisect.py, dist.py (one renderer per command), registry.py (`RENDERERS`, `write_html`), cli.py (the module's command line).
"""
from __future__ import annotations

from fusecheck.report.html.bisect import render_bisect
from fusecheck.report.html.charts import histogram_chart, line_chart, octave_chart, ratio_chart
from fusecheck.report.html.check import render_check
from fusecheck.report.html.cli import USAGE, main, report_kind
from fusecheck.report.html.dist import render_dist
from fusecheck.report.html.matrix import render_matrix
from fusecheck.report.html.page import COMPILED, EAGER, LEGEND, STATUS_COLORS, badge, esc, g3, num, page
from fusecheck.report.html.registry import RENDERERS, write_html

# the names other pages (fusecheck/train/html.py) import
_badge, _e, _g, _num, _page = badge, esc, g3, num, page

__all__ = ["RENDERERS", "write_html", "main", "report_kind", "USAGE", "render_check", "render_matrix",
           "render_bisect", "render_dist", "line_chart", "ratio_chart", "octave_chart", "histogram_chart",
           "EAGER", "COMPILED", "STATUS_COLORS", "LEGEND"]
