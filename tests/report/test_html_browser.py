"""The HTML pages of real runs, rendered by a real headless browser (Chromium): structure, not pixels.

Real reports (no synthetic JSON): `check --train --regional` of a block model with a backend that rounds its
matmuls to bf16 (30 rows: the model-scale summary), a plain `check` (cards), `dist` on a folder of two specs
(one page with a summary) and a `dist` CRASH. Each page is loaded by Chromium and its DOM after layout dumped
(`--dump-dom`); the test asserts the charts are there with their axis titles and tick labels, every row name
is on the page whole, the summary tables, the marked crashed rank and the diagnosis as text. One screenshot
checks that the page paints at the asked width. Skipped only when no Chromium binary exists (.ci/run installs
Debian's `chromium` when it can)."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fusecheck.cli.main import main

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
BROWSER = next((b for b in map(shutil.which, BROWSERS) if b), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium binary on PATH (chromium, chromium-browser, "
                                "google-chrome): apt-get install chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def browse(page: Path, *extra: str) -> str:
    """Chromium's DOM of the page (or what `extra` asks for), in a fresh profile it leaves no trace of."""
    with tempfile.TemporaryDirectory() as profile:
        run = subprocess.run([BROWSER, *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()],
                             capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


class Dom(HTMLParser):
    """What the test asserts on: the charts (kind, axis titles, tick labels), the tables, the text."""

    def __init__(self, text: str):
        super().__init__()
        self.charts: list[dict] = []
        self.tables: list[str] = []
        self.marks: list[str] = []
        self._stack: list[tuple[str, dict]] = []
        self.texts: list[str] = []
        self.feed(text.replace("<wbr>", ""))   # break opportunities are not text: names read whole

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and "chart" in (a.get("class") or ""):
            self.charts.append({"kind": a.get("data-chart"), "axis": [], "ticks": []})
        if tag == "table":
            self.tables.append(a.get("class") or "")
        self._stack.append((tag, a))

    def handle_endtag(self, tag):
        while self._stack and self._stack.pop()[0] != tag:
            pass

    def handle_data(self, data):
        if any(t in ("style", "title", "script") for t, _ in self._stack[-1:]):
            return
        self.texts.append(data)
        cls = next((a.get("class") or "" for t, a in reversed(self._stack) if t in ("text", "span")), "")
        if self.charts and any(t == "svg" for t, _ in self._stack):
            if "axis-title" in cls:
                self.charts[-1]["axis"].append(data)
            elif "tick" in cls:
                self.charts[-1]["ticks"].append(data)
        if "mark" in cls.split():
            self.marks.append(data)

    @property
    def text(self) -> str:
        return "".join(self.texts)


def assert_charts_have_axes(dom: Dom, kinds: set[str]) -> None:
    assert kinds <= {c["kind"] for c in dom.charts}, [c["kind"] for c in dom.charts]
    for c in dom.charts:
        assert c["axis"], f"a {c['kind']} chart without an axis title"
        assert len(c["ticks"]) >= 2, f"a {c['kind']} chart without a scale: {c['ticks']}"


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    out = tmp_path_factory.mktemp("pages")
    planted = "tests/planted/backends.py:bf16_matmul"
    assert main(["check", "models/wide_blocks.py:build", "--train", "--regional", "--backend", planted,
                 "--json", str(out / "train.json"), "--html", str(out / "train.html"), "-q"]) == 1
    assert main(["check", "models/mlp.py:build", "--backend", planted, "--json", str(out / "check.json"),
                 "--html", str(out / "check.html"), "-q"]) == 1
    folder = out / "specs"
    folder.mkdir()
    for name in ("a2a_reorder.py", "gemm_rs.py"):
        shutil.copy(Path("kernels") / name, folder / name)
    assert main(["dist", str(folder), "--repeat", "1", "--json", str(out / "dist.json"),
                 "--html", str(out / "dist.html"), "-q"]) == 0
    assert main(["dist", "tests/planted/dist_bugs.py:CrashesOnRank", "--repeat", "1", "--json",
                 str(out / "crash.json"), "--html", str(out / "crash.html"), "-q"]) == 3
    return out


def test_model_scale_check_page_groups_by_block_with_axes_and_every_name(pages):
    data = json.loads((pages / "train.json").read_text())
    dom = Dom(browse(pages / "train.html", "--dump-dom"))
    assert_charts_have_axes(dom, {"blocks", "ratios", "octaves"})
    blocks = next(c for c in dom.charts if c["kind"] == "blocks")
    assert "block, in model order" in blocks["axis"] and "blocks.0" in blocks["ticks"]
    assert "groups" in dom.tables and "rows" in dom.tables          # summary by block / kind, the rows
    text = dom.text
    for row in data["rows"]:                                         # every row name on the page, whole
        assert row["name"] in text, row["name"]
    assert "By block (worst first)" in text and "By parameter kind" in text
    cards = sum(1 for c in dom.charts if c["kind"] == "ratios")
    assert len(data["rows"]) > 24 and cards == 12                   # the worst rows as cards, not 30 equal ones


def test_check_page_cards_draw_the_runs_octaves(pages):
    data = json.loads((pages / "check.json").read_text())
    assert data["rows"][0]["octaves"]["compiled"]                     # the JSON holds what the chart draws
    dom = Dom(browse(pages / "check.html", "--dump-dom"))
    assert_charts_have_axes(dom, {"ratios", "octaves"})
    octaves = next(c for c in dom.charts if c["kind"] == "octaves")
    assert "|golden|, binary octave" in octaves["axis"] and any(t.startswith("2^") for t in octaves["ticks"])
    ratios = next(c for c in dom.charts if c["kind"] == "ratios")
    assert "1×" in ratios["ticks"] and any(t.endswith("0×") for t in ratios["ticks"])

    png = pages / "check.png"
    browse(pages / "check.html", f"--screenshot={png}", "--window-size=1200,1400")
    width, height = struct.unpack(">II", png.read_bytes()[16:24])   # PNG IHDR
    assert (width, height) == (1200, 1400) and png.stat().st_size > 20_000


def test_dist_folder_is_one_page_with_a_summary_and_crash_is_marked(pages):
    data = json.loads((pages / "dist.json").read_text())
    dom = Dom(browse(pages / "dist.html", "--dump-dom"))
    assert "summary" in dom.tables and dom.tables.count("grid") == len(data["checks"]) == 2
    for row in data["summary"]:
        assert row["spec"] in dom.text

    crash = Dom(browse(pages / "crash.html", "--dump-dom"))
    assert "CRASH" in crash.marks                                    # the culprit rank is marked, not green
    assert "CRASH on rank(s) 1" in crash.text and "planted crash on rank 1" in crash.text
    assert not re.search(r'"(findings|cause|evidence)":', crash.text)   # sentences, not raw JSON
