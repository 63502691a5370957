"""The renderers, one per command (`RENDERERS`), and the one function that writes a page."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from fusecheck.report.html.bisect import render_bisect
from fusecheck.report.html.check import render_check
from fusecheck.report.html.dist import render_dist
from fusecheck.report.html.matrix import render_matrix

RENDERERS: dict[str, Callable[[dict], str]] = {
    "check": render_check, "matrix": render_matrix, "bisect": render_bisect, "dist": render_dist,
}


def write_html(kind: str, data: dict, path: str | Path) -> None:
    """Write the page of `kind` (check, matrix, bisect, dist) for the command's JSON report dict."""
    Path(path).write_text(RENDERERS[kind](data), encoding="utf-8")
