"""pytest plugin (auto-registered): the `fusecheck` fixture runs the core check inside a user's tests.

    def test_my_kernel(fusecheck):
        fusecheck.assert_not_worse(my_model_case(), dtype="bf16")

`--fusecheck-json DIR` keeps every report as JSON for CI artifacts.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest


def pytest_addoption(parser):
    parser.addoption("--fusecheck-json", default=None, help="directory to write fusecheck reports (JSON) into")


class FusecheckFixture:
    def __init__(self, request):
        self._request = request
        self.reports = []

    def check(self, case, **kwargs):
        """Run `fusecheck.run.run_check` on a Case, a (model, inputs) tuple or a 'FILE.py:NAME' target."""
        from fusecheck.case import as_case, load_target
        from fusecheck.run import run_check

        from fusecheck.policy import Policy

        case = load_target(case, seed=kwargs.get("seed", 0)) if isinstance(case, str) else as_case(case)
        # as the CLI does: [tool.fusecheck] of the nearest pyproject.toml (from the test's rootdir) by default
        kwargs.setdefault("policy", Policy.load(search_from=self._request.config.rootpath))
        report = run_check(case, **kwargs)
        self.reports.append(report)
        out_dir = self._request.config.getoption("--fusecheck-json")
        if out_dir:
            from fusecheck.report.json_report import write_json
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{self._request.node.nodeid}-{len(self.reports)}")
            write_json(report.to_dict(), Path(out_dir) / f"{stem}.json")
        return report

    def assert_not_worse(self, case, **kwargs):
        """Fail the test with the verdict table unless every output passes."""
        from fusecheck.report.table import format_report

        report = self.check(case, **kwargs)
        if not report.passed:
            what = {1: "compiled is worse than eager", 2: "an output cannot be judged (ERROR rows)"}.get(
                report.exit_code, f"exit {report.exit_code}")
            pytest.fail(f"fusecheck: {what}\n" + format_report(report), pytrace=False)
        return report


@pytest.fixture
def fusecheck(request):
    return FusecheckFixture(request)
