"""Discrete decisions: a near-tied routing choice that compiled takes differently from the golden is
followed by the golden (with a note), a choice that is not tied fails, and the policy can switch it off."""
import pytest
import torch

from fusecheck.case import Case
from fusecheck.golden.choices.tap import stripping, tap_graph
from fusecheck.policy import Policy, Ratios
from fusecheck.check import run_check
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


# ---- gradient routing: relu masks and max-pool argmaxes -------------------------------------------------

from tests.planted.masks import ClipNet, PoolNet, ReluNet, pool_inputs, relu_inputs  # noqa: E402


def _train_check(model, inputs, policy=None):
    return run_check(Case(model, (inputs,), "masks"), backend="aot_eager", train=True, policy=policy)


@pytest.mark.parametrize("plant,status", [("none", "PASS"), ("nudge", "PASS"), ("cut", "FAIL")])
def test_relu_mask_ties_are_followed_and_a_wrong_mask_fails(plant, status):
    torch.manual_seed(2)
    model, x = ReluNet(plant), relu_inputs()
    report = _train_check(model, x)
    assert report.status == status, [r.verdict.message for r in report.rows if not r.passed]
    assert any("near-tied" in n for n in _decision_notes(report)) == (plant == "nudge")


def test_relu_tie_flip_fails_when_following_is_off():
    torch.manual_seed(2)
    report = _train_check(ReluNet("nudge"), relu_inputs(), policy=Policy(ratios=Ratios(decision_tie=0.0)))
    assert report.status == "FAIL"


@pytest.mark.parametrize("plant,status", [("none", "PASS"), ("nudge", "PASS"), ("cut", "FAIL")])
def test_relu6_bound_ties_are_followed_in_backward_and_a_wrong_clip_fails(plant, status):
    """hardtanh's backward reads its saved input, not its output: the golden's gradient is rerouted at the
    tied rows (on both bounds), so the nudged compile passes; with following off it fails."""
    torch.manual_seed(2)
    report = _train_check(ClipNet(plant), relu_inputs())
    assert report.status == status, [r.verdict.message for r in report.rows if not r.passed]
    notes = _decision_notes(report)
    assert any("near-tied row(s)" in n and "128 near-tied" in n for n in notes) == (plant == "nudge"), notes
    if plant == "nudge":
        off = _train_check(ClipNet(plant), relu_inputs(), policy=Policy(ratios=Ratios(decision_tie=0.0)))
        assert off.status == "FAIL"


def test_clipping_takes_the_run_s_side_only_near_a_bound():
    from fusecheck.golden.choices.ops import ATEN_OPS
    clip = ATEN_OPS[torch.ops.aten.hardtanh.default]
    x = torch.tensor([0.0, 6.0, 3.0, -1.0, 5.9999999], dtype=torch.float64)
    bound = {"min_val": 0.0, "max_val": 6.0}
    out = torch.ops.aten.hardtanh(x, 0.0, 6.0)
    mine = clip.choice(bound, out)
    assert mine.tolist() == [False, False, True, False, True]
    theirs = torch.tensor([True, True, False, True, False])  # ties at 0, 6 and 6-1e-7; 3 and -1 are not
    t = clip.follow(bound, x, out, mine, theirs, limit=1e-6)
    assert (t.taken, t.refused) == (3, 2) and torch.equal(t.out, out)  # the forward value is unchanged
    taken, chosen = t.route
    assert taken.tolist() == [True, True, False, False, True] and torch.equal(chosen, theirs)


@pytest.mark.parametrize("plant", ["none", "nudge"])
def test_max_pool_tie_routed_differently_is_followed(plant):
    torch.manual_seed(3)
    report = _train_check(PoolNet(plant), pool_inputs())
    assert report.status == "PASS", [r.verdict.message for r in report.rows if not r.passed]
    assert any("near-tied" in n for n in _decision_notes(report)) == (plant == "nudge")
    off = _train_check(PoolNet(plant), pool_inputs(), policy=Policy(ratios=Ratios(decision_tie=0.0)))
    assert off.status == ("FAIL" if plant == "nudge" else "PASS")


def test_pooling_refuses_an_index_outside_its_window_or_far_from_the_max():
    """The golden takes a run's argmax only inside the window and within the limit of the window's max."""
    from fusecheck.golden.choices.ops import ATEN_OPS
    pool = ATEN_OPS[torch.ops.aten.max_pool2d_with_indices.default]
    x = torch.tensor([[[[1.0, 1.0, 5.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]], dtype=torch.float64)
    out = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
    bound = {"kernel_size": [2, 2], "stride": [2, 2], "padding": [0, 0], "dilation": [1, 1]}
    mine = out[1]                                   # windows' argmax: [0, 2]
    tied = torch.tensor([[[[1, 2]]]])               # 1: the other 1.0 of window 0 (a tie)
    t = pool.follow(bound, x, out, mine, tied, limit=1e-9)
    assert t.taken == 1 and t.out[1].tolist() == [[[[1, 2]]]]
    far = torch.tensor([[[[0, 3]]]])                # 3: inside window 1 but 5 away from its max
    assert pool.follow(bound, x, out, mine, far, limit=1e-9).refused == 1
    outside = torch.tensor([[[[2, 2]]]])            # 2 lies in window 1, not in window 0 (a limit of 10 would tie it)
    t = pool.follow(bound, x, out, mine, outside, limit=10.0)
    assert t.refused == 1 and t.taken == 0


def test_masking_takes_the_run_s_mask_only_near_zero():
    from fusecheck.golden.choices.ops import ATEN_OPS
    relu = ATEN_OPS[torch.ops.aten.relu.default]
    x = torch.tensor([0.0, -1e-9, 0.3, -0.4], dtype=torch.float64)
    out = torch.relu(x)
    theirs = torch.tensor([True, True, False, True])  # ties at 0 and -1e-9; 0.3 and -0.4 are not ties
    t = relu.follow({}, x, out, out > 0, theirs, limit=1e-6)
    assert (t.taken, t.refused) == (2, 2)
    assert (t.out > 0).tolist() == [True, True, True, False]


def test_eager_choices_that_cannot_be_recorded_are_said_not_hidden(monkeypatch):
    """An eager run that fails under the recording dispatch mode (some ops refuse Python modes): the check
    goes on without following, says so in one note, and still gives its verdict."""
    from fusecheck.golden.choices import follow

    def refuse(self, func, types, args=(), kwargs=None):
        raise RuntimeError("this op refuses Python dispatch modes")
    monkeypatch.setattr(follow.Recorder, "__torch_dispatch__", refuse)
    report = _check(_model("none"))
    assert report.status == "PASS"
    assert any("could not be recorded" in n for n in _decision_notes(report))


def test_eager_octaves_under_two_goldens_take_the_worse_of_both():
    """With two goldens (eager's and compiled's near-tied choices differ), an octave of |golden| holds
    different elements in each: eager's largest error per octave is the worse of the two measurements,
    every other metric stays eager's against its own golden."""
    from fusecheck.compare.metrics import Metrics
    from fusecheck.check.rows import _octaves_of_both
    own = Metrics({"rmse": 1.0, "octave_n.3": 10, "octave_max_abs.3": 0.1})
    other = Metrics({"rmse": 5.0, "octave_n.3": 8, "octave_max_abs.3": 0.4, "octave_n.5": 4, "octave_max_abs.5": 0.2})
    merged = _octaves_of_both(own, other)
    assert merged.rmse == 1.0
    assert merged.octaves() == {3: (10, 0.4), 5: (4, 0.2)}
