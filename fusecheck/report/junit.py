"""JUnit XML for CI systems: one testcase per output row, failures carry the verdict message."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from fusecheck.compare import Status


def write_junit(report, path: str | Path) -> None:
    rows = report.rows
    suite = ET.Element("testsuite", name=f"fusecheck.{report.case}", tests=str(len(rows)),
                       failures=str(sum(r.verdict.status is Status.FAIL for r in rows)),
                       errors=str(sum(r.verdict.status is Status.ERROR for r in rows)))
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=f"fusecheck.{report.case}.{report.dtype}", name=r.name)
        if r.verdict.status is Status.FAIL:
            ET.SubElement(case, "failure", message=r.verdict.code).text = r.verdict.message
        elif r.verdict.status is Status.ERROR:
            ET.SubElement(case, "error", message=r.verdict.code).text = r.verdict.message
    ET.ElementTree(suite).write(path, encoding="unicode", xml_declaration=True)
