"""JUnit XML for CI systems: one testcase per output row, failures carry the verdict message.

Rows the baseline accepts as known failures are written as skipped (with the verdict), so a CI that fails
on any JUnit failure agrees with the exit code. A run that ends without a verdict (compile error,
timeout) is one testcase with an error.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from fusecheck.compare import Status

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _x(text: str) -> str:
    """XML 1.0 cannot hold most control characters, escaped or not."""
    return _NOT_XML.sub("?", str(text))


def write_junit(report, path: str | Path, known: set[str] | frozenset[str] = frozenset()) -> None:
    rows = report.rows
    failing = [r for r in rows if r.verdict.status is Status.FAIL and r.name not in known]
    suite = ET.Element("testsuite", name=_x(f"fusecheck.{report.case}"), tests=str(len(rows)),
                       failures=str(len(failing)),
                       errors=str(sum(r.verdict.status is Status.ERROR for r in rows)),
                       skipped=str(sum(not r.passed and r.name in known for r in rows)))
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=_x(f"fusecheck.{report.case}.{report.dtype}"),
                             name=_x(r.name))
        if r.verdict.status is Status.ERROR:
            ET.SubElement(case, "error", message=r.verdict.code).text = _x(r.verdict.message)
        elif r.verdict.status is Status.FAIL and r.name in known:
            ET.SubElement(case, "skipped", message=f"known failure in the baseline: {r.verdict.code}").text = (
                _x(r.verdict.message))
        elif r.verdict.status is Status.FAIL:
            ET.SubElement(case, "failure", message=r.verdict.code).text = _x(r.verdict.message)
    ET.ElementTree(suite).write(path, encoding="unicode", xml_declaration=True)


def write_junit_error(case: str, message: str, path: str | Path) -> None:
    suite = ET.Element("testsuite", name=_x(f"fusecheck.{case}"), tests="1", failures="0", errors="1")
    tc = ET.SubElement(suite, "testcase", classname=_x(f"fusecheck.{case}"), name="fusecheck")
    ET.SubElement(tc, "error", message="no verdict").text = _x(message)
    ET.ElementTree(suite).write(path, encoding="unicode", xml_declaration=True)
