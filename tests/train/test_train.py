"""`fusecheck train`: planted training bugs leave eager's band at the step they act, correct code stays quiet.

Tiny models and few steps (the long runs are benchmarks/train_drift.py). The planted backends
(tests/planted/train_plants.py) run the captured graphs as they are, so no Inductor compile is paid there.
"""
import json

import pytest
import torch

from fusecheck.case import TargetError, load_target
from fusecheck.check import run_check
from fusecheck.train.run import run_train

PLANTS = "tests/planted/train_plants.py:"
TARGETS = "tests/planted/train_targets.py:"
MLP = "models/mlp.py:build"


def train(target, **kw):
    return run_train(load_target(target, seed=kw.get("seed", 0)), spec=target, **kw)


def test_stale_weights_pass_check_and_fail_train_at_step_1():
    """The artifact of issue 23: bitwise equal to eager at step 0, so the one-step check passes it."""
    one_step = run_check(load_target(MLP), backend=PLANTS + "stale_weights", dtype="bf16", train=True)
    assert one_step.passed and all(r.verdict.code == "bitwise_equal" for r in one_step.rows)
    r = train(MLP, backend=PLANTS + "stale_weights", dtype="bf16", optimizer="sgd", steps=3, band_runs=4)
    assert r.exit_code == 1 and r.first_failed_step == 1
    assert not r.results[0].failed  # step 0 is eager's own computation
    assert "loss" in r.left_band()
    losses = [s.losses["compiled"] for s in r.results]
    assert losses[1] == pytest.approx(losses[0], rel=1e-3)  # the forward still sees step 0's weights
    assert r.results[1].losses["eager"] < losses[0] - 0.01


@pytest.mark.parametrize("plant,optimizer,first", [
    ("bf16_masters", "adamw", 0),          # the first update is already rounded
    ("loss_scale_not_undone", "sgd", 0),   # SGD's update is the gradient: 1024 x too large at once
])
def test_compiled_optimizer_plants_are_caught_where_they_act(plant, optimizer, first):
    one_step = run_check(load_target(MLP), backend=PLANTS + plant, dtype="bf16", train=True)
    assert one_step.passed  # the forward/backward graphs are untouched: check cannot see an optimizer bug
    r = train(MLP, backend=PLANTS + plant, dtype="bf16", optimizer=optimizer, steps=2, band_runs=4,
              compile_optimizer=True)
    assert r.exit_code == 1 and r.first_failed_step == first
    assert any(n.startswith("param.") for n in r.left_band())


def test_update_applied_twice_every_third_step_is_caught_at_the_first_double():
    r = train(MLP, backend=PLANTS + "double_update_every_3", dtype="bf16", steps=5, band_runs=4,
              compile_optimizer=True)
    assert r.exit_code == 1
    doubled = r.first_failed_step
    assert doubled is not None and 1 <= doubled <= 3
    assert all(not s.failed for s in r.results[:doubled])
    assert set(r.left_band()) >= {f"param.{n}" for n in ("fc1.weight", "fc2.weight")}


def test_a_plant_the_one_step_check_catches_is_caught_at_step_0():
    one_step = run_check(load_target(MLP), backend="tests/planted/backends.py:bf16_matmul", dtype="fp32", train=True)
    assert not one_step.passed
    r = train(MLP, backend="tests/planted/backends.py:bf16_matmul", dtype="fp32", steps=2, band_runs=4)
    assert r.exit_code == 1 and r.first_failed_step == 0 and "loss" in r.left_band()


def test_nan_in_compiled_is_a_failure_never_a_pass():
    r = train(MLP, backend="tests/planted/backends.py:inject_nan", dtype="fp32", steps=1, band_runs=2)
    assert r.exit_code == 1
    assert r.results[0].judged["loss"].row.verdict.code == "nan_inf_mismatch"


def test_the_aot_eager_control_is_bitwise_equal_to_eager_at_every_step():
    r = train(TARGETS + "build", backend="aot_eager", dtype="bf16", steps=3, band_runs=2)
    assert r.exit_code == 0
    assert all(j.row.verdict.code == "bitwise_equal" for s in r.results for j in s.judged.values())


def test_the_targets_own_batches_and_loss_are_used():
    r = train(TARGETS + "build", backend="eager", dtype="fp32", steps=4, band_runs=2, optimizer="sgd")
    assert "the target's batches(step)" in r.notes[0] and "the target's loss" in r.notes[0]
    shadow = [s.losses["shadow"] for s in r.results]
    assert shadow[-1] < shadow[0]  # a regression loss on fresh batches falls
    import importlib
    t = importlib.import_module("tests.planted.train_targets")
    model = load_target(TARGETS + "build").model.double()
    first = t.loss(model(*[x.double() for x in t.batches(0)]), t.batches(0))
    assert shadow[0] == pytest.approx(float(first.detach()), rel=1e-12)  # step 0's shadow loss is the fp64 loss of batch 0


@pytest.mark.parametrize("target,message", [
    ("no_parameters", "trainable parameters"),
    ("not_a_module", "nn.Module"),
    ("bad_loss", "scalar"),
])
def test_bad_targets_are_usage_errors(target, message):
    with pytest.raises(TargetError, match=message):
        train(TARGETS + target, backend="eager", steps=1, band_runs=1)


@pytest.mark.parametrize("kw,message", [({"steps": 0}, "at least one step"), ({"band_runs": 0}, "band"),
                                        ({"optimizer": "lion"}, "unknown optimizer"), ({"lr": -1.0}, "positive")])
def test_bad_settings_are_usage_errors(kw, message):
    with pytest.raises(TargetError, match=message):
        train(MLP, backend="eager", **{"steps": 1, "band_runs": 1, **kw})


def test_a_diverging_eager_training_is_named_not_judged():
    with pytest.raises(TargetError, match="diverges"):
        train(TARGETS + "build", backend="eager", optimizer="sgd", lr=1e6, steps=6, band_runs=1)


def test_shadow_on_the_host_gives_the_same_verdicts():
    a = train(MLP, backend="eager", dtype="bf16", steps=2, band_runs=2)
    b = train(MLP, backend="eager", dtype="bf16", steps=2, band_runs=2, golden_device="cpu")
    assert [s.losses for s in a.results] == [s.losses for s in b.results]
    n = sum(p.numel() for p in load_target(MLP).model.parameters())
    assert 24 * n <= b.memory["state_bytes"]["shadow"] < 24 * n + 1024  # fp64 parameters and both AdamW moments


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("target", [MLP, "fusecheck/builtin/transformer_block.py:build"])
def test_stock_inductor_stays_in_the_band_in_bf16(target, seed):
    r = train(target, backend="inductor", dtype="bf16", steps=6, seed=seed)
    assert r.exit_code == 0, [(s.step, s.failed) for s in r.results if s.failed]
    assert r.results[-1].losses["shadow"] < r.results[0].losses["shadow"]  # it trains
    assert all(s.judged["loss"].row.vs_golden is not None for s in r.results)


def test_reports_hold_the_series_the_table_and_the_curves(tmp_path):
    from fusecheck.train.html import render_train
    from fusecheck.train.report import format_train, write_junit_train
    r = train(MLP, backend=PLANTS + "stale_weights", dtype="bf16", optimizer="sgd", steps=3, band_runs=2)
    data = json.loads(json.dumps(r.to_dict()))
    assert data["first_failed_step"] == 1 and len(data["series"]) == 3
    assert set(data["series"][0]["losses"]) == {"eager", "compiled", "shadow", "band_min", "band_max"}
    assert data["series"][1]["status"] == "FAIL" and "loss" in data["series"][1]["failed"]
    assert set(data["quantities"]) == {"loss"} | {f"param.{n}" for n, _ in load_target(MLP).model.named_parameters()}
    assert data["series"][0]["by_kind"]["Linear.weight"]["eager"] >= 0
    text = format_train(r)
    assert "left eager's band at step 1" in text and "FAIL" in text.splitlines()[-1]
    page = render_train(data)
    assert page.count("<svg") == 3 and "polyline" in page and "step <b>1</b>" in page
    # the loss curves are drawn from the data: one point per step for each of the three
    assert page.count("<polyline") >= 3
    write_junit_train(r, tmp_path / "t.xml", "mlp", 1.0)
    xml = (tmp_path / "t.xml").read_text()
    assert 'name="loss"' in xml and "step 1" in xml


def test_a_shadow_that_refuses_the_kept_cast_reruns_with_the_casts_as_written():
    """The check's safety net holds for `fusecheck train` too: a model whose code asserts the dtype of its
    `.float()` fails in the fp64 shadow with the cast kept; the shadow takes the step again with the cast as
    written, says so, and the correct backend stays in the band."""
    from fusecheck.case import Case
    from tests.golden.test_golden_kept_values import AssertsItsDtype
    torch.manual_seed(0)
    case = Case(AssertsItsDtype(), (torch.randn(8, 16),), "asserts_dtype")
    r = run_train(case, backend="aot_eager", steps=2, band_runs=2)
    assert r.exit_code == 0, r.left_band()
    assert any("round as written" in n and "AssertionError" in n for n in r.notes), r.notes
