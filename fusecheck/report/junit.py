"""JUnit XML for CI systems: one testcase per output row, failures carry the verdict message.

Names are stable so that a CI's test history follows one target whatever the outcome: the suite is
`fusecheck.<target>` (the target as given on the command line, not the name the run found), each testcase
is `<classname fusecheck.<target>.<dtype>>` / `<name row>`; none has spaces or parentheses. A run that ends
without a verdict (compile error, timeout) is one testcase `run` with an error in the same suite. The root
is `<testsuites>` with `time`; each testcase's `time` is its share of the run (all rows are judged from the
same eager, compiled and golden runs, so the run's time is split evenly).

Rows the baseline accepts as known failures are written as skipped (with the verdict), so a CI that fails
on any JUnit failure agrees with the exit code.
"""
from __future__ import annotations

import collections
import datetime
import hashlib
import re
import socket
import xml.etree.ElementTree as ET
from pathlib import Path

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_NOT_NAME = re.compile(r"[^A-Za-z0-9_.\-\[\]:/]+")


def _x(text: str) -> str:
    """XML 1.0 cannot hold most control characters, escaped or not."""
    return _NOT_XML.sub("?", str(text))


def junit_name(text: str) -> str:
    """A name CI tools display and group reliably: no spaces, parentheses or control characters."""
    return _NOT_NAME.sub("_", str(text)).strip("_") or "_"


def unique_names(texts: list[str]) -> dict[str, str]:
    """junit_name of each text, with a short hash of the text where two different texts would read the same
    (`attn out` and `attn_out`, or two names in another script): CI tools merge testcases by name."""
    clean = {t: junit_name(t) for t in texts}
    count = collections.Counter(clean.values())
    return {t: c if count[c] == 1 else f"{c}~{hashlib.sha1(t.encode()).hexdigest()[:6]}" for t, c in clean.items()}


def _dtype(text: str) -> str:
    return str(text).split(" ")[0]  # "float32 (the model's own)" -> "float32"


def _root(suite_name: str, seconds: float, counts: dict[str, int]) -> tuple[ET.Element, ET.Element]:
    root = ET.Element("testsuites", name="fusecheck", time=f"{seconds:.3f}",
                      **{k: str(v) for k, v in counts.items() if k != "skipped"})
    suite = ET.SubElement(root, "testsuite", name=junit_name(f"fusecheck.{suite_name}"), time=f"{seconds:.3f}",
                          timestamp=datetime.datetime.now().isoformat(timespec="seconds"),
                          hostname=socket.gethostname(), **{k: str(v) for k, v in counts.items()})
    return root, suite


def _write(root: ET.Element, path: str | Path) -> None:
    ET.indent(root)
    ET.ElementTree(root).write(path, encoding="unicode", xml_declaration=True)


def write_junit(report, path: str | Path, known: set[str] | frozenset[str] = frozenset(),
                suite: str | None = None, seconds: float | None = None) -> None:
    """`suite`: the stable target name (report/on_error.target_id); default the report's case name."""
    from fusecheck.compare import Status

    rows = report.rows
    total = sum(getattr(report, "seconds", {}).values()) if seconds is None else seconds
    counts = {"tests": len(rows),
              "failures": sum(r.verdict.status is Status.FAIL and r.name not in known for r in rows),
              "errors": sum(r.verdict.status is Status.ERROR for r in rows),
              "skipped": sum(not r.passed and r.name in known for r in rows)}
    name = suite or report.case
    root, ts = _root(name, total, counts)
    share = total / max(1, len(rows))
    names = unique_names([r.name for r in rows])
    for r in rows:
        case = ET.SubElement(ts, "testcase", classname=junit_name(f"fusecheck.{name}.{_dtype(report.dtype)}"),
                             name=names[r.name], time=f"{share:.3f}")
        if r.verdict.status is Status.ERROR:
            ET.SubElement(case, "error", message=r.verdict.code).text = _x(r.verdict.message)
        elif r.verdict.status is Status.FAIL and r.name in known:
            ET.SubElement(case, "skipped", message=f"known failure in the baseline: {r.verdict.code}").text = (
                _x(r.verdict.message))
        elif r.verdict.status is Status.FAIL:
            ET.SubElement(case, "failure", message=r.verdict.code).text = _x(r.verdict.message)
    _write(root, path)


def write_junit_error(suite: str, message: str, path: str | Path, seconds: float = 0.0) -> None:
    """A run with no verdict: one testcase `run` with an error, in the same suite a verdict would use."""
    root, ts = _root(suite, seconds, {"tests": 1, "failures": 0, "errors": 1, "skipped": 0})
    tc = ET.SubElement(ts, "testcase", classname=junit_name(f"fusecheck.{suite}"), name="run",
                       time=f"{seconds:.3f}")
    ET.SubElement(tc, "error", message="no verdict").text = _x(message)
    _write(root, path)
