"""The pytest side of `fusecheck op` and of repeats: what the `fusecheck` fixture's methods call.

    def test_my_kernel(fusecheck):
        fusecheck.assert_not_worse_op(MyOpSpec(), dtype="bf16")               # or dtype=["fp32", "bf16"]
        fusecheck.assert_not_worse_op(MyOpSpec(), dtype="fp16", rate_bound=0.05)  # 73 runs, rate bounded
        fusecheck.assert_not_worse(case, backend=my_backend, repeat=20)      # the check, 20 judged runs

A spec or usage mistake fails the test in one line; a kernel that raises too (the message names it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def _dtypes(dtype) -> list[str] | None:
    if dtype is None:
        return None
    return [dtype] if isinstance(dtype, str) else list(dtype)


def check_op_in_test(fixture, spec, *, dtype=None, repeat: int = 1, rate_bound: float | None = None, **kwargs):
    """`fusecheck.op.check_op` with the test's policy ([tool.fusecheck] from the rootdir), its report kept."""
    from fusecheck.op.run import check_op
    from fusecheck.op.spec import KernelError, SpecError
    from fusecheck.policy import Policy
    from fusecheck.rates import runs_for_bound
    try:
        n = max(repeat, runs_for_bound(rate_bound)) if rate_bound is not None else repeat
        kwargs.setdefault("policy", Policy.load(search_from=fixture._request.config.rootpath))
        report = check_op(spec, dtypes=_dtypes(dtype), repeat=n, requested_rate=rate_bound, **kwargs)
    except (SpecError, ValueError) as exc:
        pytest.fail(f"fusecheck op: error: {exc}", pytrace=False)
    except KernelError as exc:
        pytest.fail(f"fusecheck op: error: the kernel under test raised: {exc}", pytrace=False)
    fixture.reports.append(report)
    _keep_json(fixture, report.to_dict())
    return report


def assert_not_worse_op(fixture, spec, **kwargs):
    """Fail the test with the op report unless every row and every run passes."""
    from fusecheck.op.report import format_op_report
    report = check_op_in_test(fixture, spec, **kwargs)
    if not report.passed:
        what = {1: "the fused op is worse than its unfused chain",
                2: "a row cannot be judged (ERROR rows)"}.get(report.exit_code, f"exit {report.exit_code}")
        pytest.fail(f"fusecheck op: {what}\n" + format_op_report(report), pytrace=False)
    return report


def repeated(check_once, kwargs: dict[str, Any]):
    """For the fixture's `check`: `repeat=` / `rate_bound=` popped from `kwargs`; None when neither was given."""
    repeat, rate_bound = kwargs.pop("repeat", None), kwargs.pop("rate_bound", None)
    if repeat is None and rate_bound is None:
        return None
    from fusecheck.op.repeated import repeat_check
    return repeat_check(check_once, repeat=repeat, rate_bound=rate_bound, seed=kwargs.get("seed", 0),
                        train=kwargs.get("train", False))


def _keep_json(fixture, data: dict) -> None:
    import re

    from fusecheck.report.json_report import write_json
    out_dir = fixture._request.config.getoption("--fusecheck-json")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{fixture._request.node.nodeid}-{len(fixture.reports)}")
        write_json(data, Path(out_dir) / f"{stem}.json")
