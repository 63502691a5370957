"""The rolled call of a model that decides, judged against eager following compiled's choices at near-ties
(fusecheck/check/rolled_choices.py): a race on that call fails whatever the decisions; a correct compile whose
choices differ from eager's at ties stays quiet."""
import pytest
import torch

from fusecheck import backends
from fusecheck.backends import Backend
from fusecheck.check import run_check
from fusecheck.case import load_target
from fusecheck.check.rolled_choices import RolledChoices, decision_noise
from tests.planted import backends as planted


@pytest.fixture
def registered(monkeypatch):
    """Planted backends registered by name: a registered backend's graphs carry fusecheck's decision taps,
    where a FILE.py:NAME backend's do not."""
    for name in ("third_call_race", "in_fp64"):
        fn = getattr(planted, name)
        monkeypatch.setitem(backends.BACKENDS, name, Backend(name, "planted", lambda fn=fn: fn))


def check(target, **kw):
    return run_check(load_target(target), **kw)


@pytest.mark.parametrize("target,train", [("tests/planted/cases.py:routed_dense", False),
                                          ("tests/planted/cases.py:routed_dense", True),
                                          ("models/conv_bn_relu.py:build", True)])
def test_a_race_on_the_rolled_call_of_a_deciding_model_fails_outputs_and_gradients(registered, target, train):
    r = check(target, backend="third_call_race", train=train)
    failed = {row.name: row.verdict.code for row in r.rows if not row.passed}
    assert r.exit_code == 1 and set(failed.values()) == {"rolled_call_worse"}, failed
    assert "output" in failed
    if train:
        assert any(n.startswith("grad.") for n in failed), failed
    assert not any("bits only" in n or "outputs only" in n for n in r.notes)


@pytest.mark.parametrize("target,train", [("tests/planted/cases.py:routed_dense", True),
                                          ("models/conv_bn_relu.py:build", True)])
def test_a_correct_compile_of_a_deciding_model_passes_with_every_rolled_result_judged(registered, target, train):
    r = check(target, backend="aot_eager", train=train)
    assert r.exit_code == 0, [(row.name, row.verdict.code) for row in r.rows if not row.passed]
    assert not any("bits only" in n or "outputs only" in n for n in r.notes)


def test_choices_at_ties_that_differ_from_eager_are_followed_and_pass(registered):
    """Run in fp64, compiled resolves bf16 ties its own way: eager follows it there, and it passes."""
    r = check("tests/planted/cases.py:routed_dense_tall", backend="in_fp64", dtype="bf16", train=True)
    assert r.exit_code == 0, [(row.name, row.verdict.code, row.verdict.message) for row in r.rows if not row.passed]
    followed = [n for n in r.notes if "chose differently from eager" in n]
    assert followed and "near-tied" in followed[0], r.notes


def test_choices_moved_by_a_wrong_value_upstream_are_not_followed_and_fail(registered):
    """The race corrupts the projection's graph; the top-k graph then chooses beyond any tie: eager keeps its
    own choice there, and the rolled call fails."""
    r = check("tests/planted/cases.py:routed_after_break", backend="third_call_race", dtype="bf16", train=True)
    assert r.exit_code == 1
    assert {row.verdict.code for row in r.rows if not row.passed} == {"rolled_call_worse"}
    assert any("not tied and eager keeps its own" in n for n in r.notes), r.notes


def test_choices_compared_once_at_the_first_result():
    live = [torch.tensor([1, 2])]
    c = RolledChoices([torch.tensor([3])], live, 1)
    live.append(torch.tensor([3]))
    assert not c.differ()
    live[1] = torch.tensor([4])
    assert not c.differ()  # read once
    assert RolledChoices([torch.tensor([3])], [torch.tensor([4])], 0).differ()


def test_decision_noise_is_rounding_noise_at_each_decision_input():
    torch.manual_seed(0)
    w, x = torch.randn(64, 64, dtype=torch.bfloat16), torch.randn(8, 64, dtype=torch.bfloat16)

    def run():
        h = (x @ w).relu() @ w
        return {"out": h.topk(3, dim=-1).values}
    calls, noise = decision_noise(run, seed=0)
    assert [c.op for c in calls] == ["relu", "topk"]
    ulp = torch.finfo(torch.bfloat16).eps
    for i, c in enumerate(calls):  # a few ulps of the input's scale: noise, not O(1)
        scale = float(c.input.double().abs().max())
        assert 0 < noise[i] <= 16 * ulp * scale, (i, noise[i], scale)


@pytest.mark.parametrize("backend,code", [("aot_eager", 0), ("third_call_race", 1)])
def test_choices_that_cannot_be_lined_up_leave_a_masking_model_its_outputs_judged(registered, backend, code):
    """A relu outside the compiled graphs: eager decides once more than compiled's taps say. Nothing can be
    followed, so the outputs are judged against eager as it is (a mask's forward is continuous at a tie): a
    race on the rolled call still fails there."""
    r = check("tests/planted/cases.py:relu_outside_graph", backend=backend, train=True)
    assert r.exit_code == code, [(row.name, row.verdict.code) for row in r.rows]
    assert any("its outputs are judged against eager as it is" in n for n in r.notes), r.notes
    if code:
        assert {row.name for row in r.rows if not row.passed} == {"output"}


def test_the_screen_keeps_results_while_the_choices_differ_and_scores_them_otherwise():
    from fusecheck.check.rolled import RolledScreen
    e = {"output": torch.ones(8), "grad.w": torch.ones(8)}
    same, differ = RolledScreen(e, follows=True), RolledScreen(e, follows=True)
    same.choices = RolledChoices([torch.tensor([1])], [torch.tensor([1])], 0)
    differ.choices = RolledChoices([torch.tensor([1])], [torch.tensor([2])], 0)
    for screen in (same, differ):
        screen.add("output", torch.full((8,), 2.0))
        screen.add("grad.w", torch.full((8,), 2.0))
    assert set(same.stats) == {"output", "grad.w"} and not same.kept
    assert set(differ.kept) == {"output", "grad.w"} and not differ.stats


def test_judging_kept_results_makes_as_many_eager_runs_whatever_is_kept_and_scores_every_one():
    """Every rank of a sharded check makes the same runs (collectives): with and without kept results, and
    with decisions that cannot be lined up."""
    from fusecheck.check.rolled_choices import NOISE_RUNS, judge_kept
    torch.manual_seed(0)
    w, x = torch.randn(16, 16), torch.randn(8, 16)
    calls = []

    def run():
        calls.append(1)
        h = x @ w
        return {"output": h.topk(2, dim=-1).values}
    theirs = [h_idx for h_idx in [(x @ w).topk(2, dim=-1).indices]]
    for kept in ({}, {"output": (x @ w).topk(2, dim=-1).values * 1.2}):
        for targets in (theirs, []):
            calls.clear()
            notes = []
            stats = judge_kept(kept, targets, run, tie=2.0, seed=0, notes=notes)
            assert len(calls) == 2 + NOISE_RUNS
            if kept and targets:
                assert set(stats) == {"output"} and stats["output"].rmse > 0
            if kept and not targets:
                assert stats == {} and any("bits only" in n for n in notes)
