"""Each phase reports its own time: the rows judged while the golden runs are the "judge" phase, not the
golden's arithmetic (issue 22: a streamed golden looked 20-40x slower than the fp64 work it does because the
per-gradient judging was booked to it)."""
import time

import torch

from fusecheck.case import Case
from fusecheck.check import run_check
from fusecheck.check.pipeline import Pipeline


def test_judging_is_its_own_phase_and_the_total_is_kept():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    r = run_check(Case(model, (torch.randn(5, 8),), "mlp"), backend="aot_eager", train=True)
    assert r.passed
    assert r.seconds["judge"] > 0 and r.seconds["golden"] >= 0  # 1 output + 4 gradients judged in the sink


def test_carve_moves_the_nested_time_out_of_the_enclosing_phase():
    p = Pipeline.__new__(Pipeline)  # only the timings matter here
    p.timings = {"golden": 1.0}
    slow = p.timed("judge", lambda: time.sleep(0.01))
    before = p.timings.get("judge", 0.0)
    slow()
    p.timings["golden"] += 0.5  # the enclosing phase closes with the nested time inside it
    p.carve("judge", "golden", before)
    assert p.timings["judge"] >= 0.01
    assert abs(p.timings["judge"] + p.timings["golden"] - 1.5) < 1e-9
