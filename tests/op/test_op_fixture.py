"""The pytest side of `fusecheck op` (fusecheck/op/fixture.py), driven through the `fusecheck` fixture object."""
from __future__ import annotations

import pytest

from fusecheck.op import load_spec
from fusecheck.op.fixture import assert_not_worse_op

SHAPES = [{"m": 5, "k": 24, "n": 50}]


def test_the_correct_op_passes_and_its_report_is_kept(fusecheck):
    report = assert_not_worse_op(fusecheck, load_spec("kernels/op_online_softmax.py:OnlineSoftmax"), dtype="bf16",
                                 shapes=SHAPES, probes=False)
    assert report.passed and fusecheck.reports == [report]


def test_a_tail_bug_fails_the_test_with_the_report(fusecheck):
    with pytest.raises(pytest.fail.Exception, match="worse than its unfused chain") as info:
        assert_not_worse_op(fusecheck, load_spec("tests/planted/op_tail_bug.py:TailChunkDropped"), dtype=["fp32"],
                            shapes=SHAPES, probes=False)
    assert "fp32[m=5,k=24,n=50]" in str(info.value)


def test_rate_bound_runs_what_the_bound_needs(fusecheck):
    report = assert_not_worse_op(fusecheck, load_spec("kernels/op_online_softmax.py:OnlineSoftmax"), dtype="fp32",
                                 shapes=SHAPES, probes=False, rate_bound=0.05)
    assert report.repeat == 73 and report.overall.excludes(0.05)
