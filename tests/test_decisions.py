"""Discrete decisions: a near-tied routing choice that compiled takes differently from the golden is
followed by the golden (with a note), a choice that is not tied fails, and the policy can switch it off."""
import pytest
import torch

from fusecheck.case import Case
from fusecheck.decisions.tap import stripping, tap_graph
from fusecheck.policy import Policy, Ratios
from fusecheck.run import run_check
from tests.planted.routing import Stacked, TopOneMoE


def _check(model, train=False, policy=None, golden="auto"):
    torch.manual_seed(0)
    return run_check(Case(model, (torch.randn(32, 16),), "moe"), backend="aot_eager", train=train,
                     policy=policy, golden=golden)


def _decision_notes(report):
    return [n for n in report.notes if n.startswith("decisions:")]


def _model(plant):
    torch.manual_seed(1)
    return TopOneMoE(plant=plant)


def test_quiet_when_compiled_routes_as_eager():
    report = _check(_model("none"))
    assert report.status == "PASS" and not _decision_notes(report)


def test_near_tied_choice_taken_differently_is_followed():
    report = _check(_model("nudge"))
    notes = _decision_notes(report)
    assert report.status == "PASS", [r.verdict.message for r in report.rows if not r.passed]
    assert len(notes) == 1 and "near-tied" in notes[0] and "compiled" in notes[0]


def test_near_tie_fails_without_following():
    """The same run with ratios.decision_tie = 0: the flip alone fails the output (so the rule is what
    makes the PASS above, and a user can switch it off in the policy)."""
    report = _check(_model("nudge"), policy=Policy(ratios=Ratios(decision_tie=0.0)))
    assert report.status == "FAIL"


def test_misrouting_beyond_the_tie_bound_fails():
    report = _check(_model("misroute"))
    assert report.status == "FAIL"
    assert any("not tied" in n for n in _decision_notes(report))


@pytest.mark.parametrize("plant,status", [("nudge", "PASS"), ("misroute", "FAIL")])
def test_streamed_golden_follows_through_its_recompute(plant, status):
    """--train with a streamed golden: each block's forward is recomputed in backward, and must take the
    same choices again (else the gradients would be judged against a different routing)."""
    torch.manual_seed(1)
    report = _check(Stacked(plant), train=True, golden="streamed")
    assert report.golden_mode.startswith("streamed")
    assert report.status == status, [r.verdict.message for r in report.rows if not r.passed]
    grads = [r for r in report.rows if r.name.startswith("grad.")]
    assert grads and (status == "FAIL" or all(r.passed for r in grads))


def test_tap_adds_decision_indices_and_strips_them():
    def f(x):
        v, i = x.topk(2, -1)
        return v * 2
    seen = {}

    def backend(gm, example_inputs):
        seen["added"] = tap_graph(gm)
        log = []
        seen["log"] = log
        return stripping(gm.forward, seen["added"], log)
    x = torch.randn(4, 5)
    out = torch.compile(f, backend=backend)(x)
    torch._dynamo.reset()
    assert seen["added"] == 1
    assert torch.equal(out, x.topk(2, -1).values * 2)
    assert len(seen["log"]) == 1 and torch.equal(seen["log"][0], x.topk(2, -1).indices)
