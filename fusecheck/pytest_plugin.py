"""pytest plugin (auto-registered): the `fusecheck` fixture runs the core check inside a user's tests.

    def test_my_kernel(fusecheck):
        fusecheck.assert_not_worse(my_model_case(), dtype="bf16")            # backend="inductor" by default
        fusecheck.assert_not_worse(my_model_case(), backend=my_dynamo_backend)  # a callable works too
        fusecheck.assert_not_worse(my_model_case(), backend=my_backend, repeat=20)  # 20 judged runs, a rate
        fusecheck.assert_not_worse_op(MyOpSpec(), dtype="bf16")             # a fused op (docs/op.md)

`--fusecheck-json DIR` keeps every report as JSON for CI artifacts. A usage mistake (unknown backend, bad
target) fails the test with one line, not a traceback through fusecheck's internals; torch's structured
trace log (empty DEBUG records) is kept out of the test's captured log.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from pathlib import Path
from typing import Iterator

import pytest

# torch's structured trace logger emits DEBUG records with empty messages on every compile (for tlparse,
# when TORCH_TRACE is set); pytest's capture handlers sit on it too and turn them into ~50 blank
# "DEBUG torch.__trace" lines per failing test. Only torch's own handlers are kept on it during a check.
NOISY_LOGGERS = ("torch.__trace",)


def pytest_addoption(parser):
    parser.addoption("--fusecheck-json", default=None, help="directory to write fusecheck reports (JSON) into")


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in NOISY_LOGGERS]
    before = [list(lg.handlers) for lg in loggers]
    for lg in loggers:
        for h in list(lg.handlers):
            if type(h).__module__.startswith("_pytest"):
                lg.removeHandler(h)
    try:
        yield
    finally:
        for lg, handlers in zip(loggers, before):
            for h in handlers:
                if h not in lg.handlers and type(h).__module__.startswith("_pytest"):
                    lg.addHandler(h)


class FusecheckFixture:
    def __init__(self, request):
        self._request = request
        self.reports = []

    def check(self, case, **kwargs):
        """Run `fusecheck.check.run_check` on a Case, a (model, inputs) tuple or a 'FILE.py:NAME' target.
        `repeat=N` / `rate_bound=P`: the check N times (seed + i; a FILE.py:NAME target is built anew for
        each seed, a Case is checked as given), every run judged; the report then carries the failure rate,
        its Wilson 95% bound and its unit (notes, and `repeats` in to_dict())."""
        from fusecheck.case import as_case, load_target
        from fusecheck.errors import UserError
        from fusecheck.op.fixture import repeated
        from fusecheck.policy import Policy
        from fusecheck.check import run_check

        try:
            target = case
            case = load_target(case, seed=kwargs.get("seed", 0)) if isinstance(case, str) else as_case(case)
            # as the CLI does: [tool.fusecheck] of the nearest pyproject.toml (from the test's rootdir) by default
            kwargs.setdefault("policy", Policy.load(search_from=self._request.config.rootpath))

            def check_once(seed: int):
                this = load_target(target, seed=seed) if isinstance(target, str) and seed != kwargs.get("seed", 0) \
                    else case
                with _quiet_torch_logs():
                    return run_check(this, **{**kwargs, "seed": seed})
            report = repeated(check_once, kwargs)
            if report is None:
                with _quiet_torch_logs():
                    report = run_check(case, **kwargs)
        except UserError as exc:  # the user's mistake: one line, as the CLI says it
            pytest.fail(f"fusecheck: error: {exc}", pytrace=False)
        self.reports.append(report)
        out_dir = self._request.config.getoption("--fusecheck-json")
        if out_dir:
            from fusecheck.report.json_report import write_json
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            node = self._request.node.nodeid
            # sanitised ids of two parametrisations can coincide ([a/b] and [a_b]): the id's hash keeps them apart
            stem = (re.sub(r"[^A-Za-z0-9_.-]", "_", f"{node}-{len(self.reports)}")
                    + "-" + hashlib.sha1(node.encode()).hexdigest()[:8])
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

    def check_op(self, spec, **kwargs):
        """`fusecheck op` on an OpSpec instance (or 'FILE.py:Spec'): dtype= one or a list, shapes=, repeat=,
        rate_bound=, train=, probes=, device=, seed=; the report is kept (and written by --fusecheck-json)."""
        from fusecheck.op.fixture import check_op_in_test
        with _spec(spec) as loaded:
            return check_op_in_test(self, loaded, **kwargs)

    def assert_not_worse_op(self, spec, **kwargs):
        """Fail the test with the op report unless every dtype, shape, probe and run passes."""
        from fusecheck.op.fixture import assert_not_worse_op
        with _spec(spec) as loaded:
            return assert_not_worse_op(self, loaded, **kwargs)


@contextlib.contextmanager
def _spec(spec):
    """An OpSpec as given; a 'FILE.py:Spec' loaded, with its folder on sys.path while it runs (as `fusecheck
    op` does: a spec imports the kernel module beside it)."""
    if not isinstance(spec, str):
        yield spec
        return
    from fusecheck.op.spec import SpecError, load_spec, spec_folder_on_path
    with spec_folder_on_path(spec):
        try:
            loaded = load_spec(spec, [])
        except SpecError as exc:
            pytest.fail(f"fusecheck op: error: {exc}", pytrace=False)
        yield loaded


@pytest.fixture
def fusecheck(request):
    return FusecheckFixture(request)
