"""`python -m fusecheck.report.html [KIND] REPORT.json OUT.html`: the page of a saved JSON report."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

USAGE = ("usage: python -m fusecheck.report.html [KIND] REPORT.json OUT.html\n"
         "  the HTML page of a report that `fusecheck check|matrix|bisect|dist --json` wrote; KIND (check, matrix, "
         "bisect, dist) is read from the report when left out")


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


def main(argv: list[str] | None = None) -> int:
    """0 written, 2 bad usage or not a report (one line), 3 the page could not be written."""
    from fusecheck.report.html import registry as pages
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0

    def error(message: str) -> int:
        print(f"fusecheck: error: {message}", file=sys.stderr)
        return 2
    if len(argv) == 3 and argv[0] in pages.RENDERERS:
        kind, src, dst = argv
    elif len(argv) == 2 and argv[0] not in pages.RENDERERS:
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
    if found == "dist" and "checks" in data and not data["checks"]:
        return error(f"{src}: a dist summary with no check that ran: no grid to draw")
    try:
        pages.write_html(found, data, dst)
    except OSError as exc:
        print(f"fusecheck: error: {dst}: cannot write the page ({exc.strerror or exc})", file=sys.stderr)
        return 3
    return 0
