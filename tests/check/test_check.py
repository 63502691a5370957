"""The core check end to end: planted bad backends fail, real Inductor passes, bad inputs are named."""
import pytest
import torch

from fusecheck.case import TargetError, load_target
from fusecheck.compare import Status
from fusecheck.check import run_check

PLANTED = "tests/planted/backends.py:"


def check(target, **kw):
    return run_check(load_target(target), **kw)


@pytest.mark.parametrize("backend,target", [
    ("bf16_matmul", "models/mlp.py:build"),
    ("bf16_matmul", "models/conv_bn_relu.py:build"),
    ("bf16_accumulation", "fusecheck/builtin/transformer_block.py:build"),
])
def test_planted_precision_bugs_fail_in_fp32(backend, target):
    r = check(target, backend=PLANTED + backend, dtype="fp32")
    assert r.status == "FAIL" and r.exit_code == 1
    assert all(row.verdict.code == "worse_than_eager" for row in r.rows)
    assert all(row.error_ratio > 2 for row in r.rows)


def test_dropped_upcast_overflows_fp16_and_fails():
    r = check("tests/planted/cases.py:big_rmsnorm", backend=PLANTED + "drop_upcast", dtype="fp16")
    assert r.status == "FAIL"
    assert r.rows[0].verdict.code in {"nan_inf_mismatch", "worse_than_eager"}


def test_planted_bug_in_backward_is_caught_in_gradients():
    r = check("models/mlp.py:build", backend=PLANTED + "bf16_matmul", dtype="fp32", train=True)
    grads = [row for row in r.rows if row.name.startswith("grad.")]
    assert grads and any(row.verdict.code == "worse_than_eager" for row in grads)


def test_control_backends_are_bitwise_equal_to_eager():
    r = check("fusecheck/builtin/transformer_block.py:build", backend="aot_eager", dtype="bf16", train=True)
    assert r.status == "PASS" and {row.verdict.code for row in r.rows} == {"bitwise_equal"}
    assert any(row.name.startswith("grad.") for row in r.rows)


@pytest.mark.parametrize("backend,code", [
    ("inject_nan", "nan_inf_mismatch"), ("wrong_dtype", "dtype_mismatch"),
    ("wrong_shape", "shape_mismatch"), ("wrong_device", "device_mismatch"),
])
def test_structural_findings_from_backends(backend, code):
    r = check("models/mlp.py:build", backend=PLANTED + backend)
    assert r.rows[0].verdict.code == code and r.exit_code == 1


def test_nondeterministic_compiled_is_its_own_finding():
    r = check("models/mlp.py:build", backend=PLANTED + "noisy")
    assert not r.compiled_repeatable
    assert r.rows[0].verdict.code == "nondeterministic_compiled" and r.eager_repeatable


def test_harmless_compiled_nondeterminism_is_judged_not_failed():
    """Bits that move between two compiled runs (atomic adds) while both runs stay as accurate as eager:
    a PASS that says so. The planted `noisy` backend above, whose second run is worse, still fails."""
    r = check("models/mlp.py:build", backend=PLANTED + "ulp_jitter")
    assert r.status == "PASS", [row.verdict.message for row in r.rows]
    assert any("both compiled runs are judged" in n for n in r.rows[0].notes)
    assert not r.compiled_repeatable and not r.to_dict()["compiled_repeatable"]  # the JSON tells the truth


@pytest.mark.parametrize("race", ["first_call_race", "second_call_race"])
@pytest.mark.parametrize("train", [False, True])
def test_a_compiled_run_wrong_on_any_single_call_fails(race, train):
    """Every produced compiled result is judged against the golden, whichever call produced it."""
    r = check("models/mlp.py:build", backend=PLANTED + race, train=train)
    assert r.exit_code == 1 and not r.compiled_repeatable
    failed = [row for row in r.rows if not row.passed]
    assert failed and all(row.verdict.code == "nondeterministic_compiled" for row in failed)
    assert any("worse_than_eager" in row.verdict.message for row in failed)
    assert r.rows[0].vs_golden.rmse > 10 * r.rows[0].reference_vs_golden.rmse  # the row shows the bad run


@pytest.mark.parametrize("race,code", [("third_call_race", "rolled_call_worse"),
                                       ("fourth_call_race", "nondeterministic_compiled")])
@pytest.mark.parametrize("train", [False, True])
def test_the_calls_around_other_inputs_are_judged_too(race, code, train):
    """The stale-result probe's two calls (on rolled inputs, then the first inputs again) are produced
    results: a race on either fails, the rolled one against eager's call on the same inputs."""
    r = check("models/mlp.py:build", backend=PLANTED + race, train=train)
    failed = [row for row in r.rows if not row.passed]
    assert r.exit_code == 1 and failed and all(row.verdict.code == code for row in failed), \
        [(row.name, row.verdict.code) for row in r.rows]
    assert failed[0].name.startswith("output")
    if code == "rolled_call_worse":
        assert "inputs rolled by one" in failed[0].verdict.message


@pytest.mark.parametrize("backend,code", [("in_fp64", 0), ("third_call_race", 1)])
def test_eager_noisier_on_the_rolled_inputs_is_measured_there_before_a_fail(backend, code):
    """On the rolled inputs two large values cancel in eager's sum (its error there ~ulp(3e4), hundreds of
    times the first inputs'): the rule's estimate from the first inputs fails a compile that is more accurate
    than eager, and eager's randomised-rounding runs on the rolled inputs clear it; a race on that call still
    fails against the measured noise."""
    r = check("tests/planted/cases.py:cancels_when_rolled", backend=PLANTED + backend)
    assert r.exit_code == code, [(row.name, row.verdict.code, row.verdict.message) for row in r.rows]
    assert any("judged again against 4 randomised-rounding eager runs on the rolled inputs" in n for n in r.notes)
    if code:
        assert r.rows[0].verdict.code == "rolled_call_worse"
    else:
        assert "within eager's own noise there" in r.rows[0].notes[-1]


@pytest.mark.parametrize("call", [2, 3, 4, 5])
def test_a_compiled_call_that_raises_on_any_call_is_a_compile_error(call):
    """Never a PASS: a compiled artifact that crashes on a later call (3: the call on other inputs, which eager
    runs) ends the check as the compiler's error (exit 3), whichever call it was."""
    from fusecheck.check import CompileError
    with pytest.raises(CompileError, match=f"planted: kernel launch failed on call {call}"):
        check("models/mlp.py:build", backend=PLANTED + f"raises_on_call_{call}", calls=max(call, 4))


def test_a_target_that_cannot_take_the_rolled_inputs_skips_that_probe_with_a_note():
    """Eager itself fails on the rolled inputs (the target checks its input's order): the probe does not apply,
    the check goes on and says so, and a correct compile passes."""
    r = check("tests/planted/cases.py:sorted_input_only", backend="aot_eager")
    assert r.exit_code == 0 and any("inputs rolled by one) raised" in n for n in r.notes), r.notes


@pytest.mark.parametrize("train", [False, True])
def test_a_mistyped_norm_epsilon_is_a_systematic_scale_and_fails(train):
    """Epsilon 1e-2 for 1e-5 over unit-variance activations, bf16: every element ~0.5% small, at about 2x eager's
    RMSE. The slope of the error on the golden names it; the same model compiled without the plant passes."""
    target = "tests/planted/cases.py:norm_residual"
    r = check(target, backend=PLANTED + "norm_eps_too_large", dtype="bf16", train=train)
    assert r.exit_code == 1, [(row.name, row.verdict.code) for row in r.rows]
    assert "scale_error" in " ".join(r.rows[0].verdict.failed_checks), r.rows[0].verdict.message
    assert check(target, backend="aot_eager", dtype="bf16", train=train).exit_code == 0


def test_a_constant_offset_on_a_weight_gradient_fails_where_the_rmse_ratio_passes():
    """Every element of the qkv weight gradient shifted by 1% of its mean magnitude, bf16 --train: compiled's RMSE
    1.6x eager's (under the limit of 2), no slope on the golden; the mean error names it. The same model compiled
    without the plant passes."""
    target = "fusecheck/builtin/transformer_block.py:build"
    r = check(target, backend=PLANTED + "weight_grad_offset", dtype="bf16", train=True)
    assert r.exit_code == 1, [(row.name, row.verdict.code) for row in r.rows]
    failed = [row for row in r.rows if not row.verdict.passed]
    assert [row.name for row in failed] == ["grad.qkv.weight"], [row.name for row in failed]
    assert [f.split(" ", 1)[0] for f in failed[0].verdict.failed_checks] == ["offset_error"], failed[0].verdict.message
    assert check(target, backend="aot_eager", dtype="bf16", train=True).exit_code == 0


def test_an_offset_from_row_errors_that_share_a_source_is_settled_by_eagers_family():
    """Rows of 8,192 values near 300 centred by their mean (fp32): the error's mean is four rounded row means, and
    stock Inductor's are 2.3x eager's by chance; the formula for independent elements fails it, eager's own
    randomised runs measure the real spread and pass it (a red team's false FAIL)."""
    r = check("tests/planted/cases.py:centered_wide_rows", seed=1)
    assert r.exit_code == 0, r.rows[0].verdict.message
    assert "offset_error" in r.rows[0].verdict.message and "eager's family" in r.rows[0].verdict.message


def test_the_largest_element_of_a_wide_gradient_wrong_fails_on_max_abs_and_the_noise_band():
    """A bf16 weight gradient of 262,144 elements whose largest (-8.125, alone in its octave) is 30% off: 78x eager's
    largest error, under every aggregate check and the per-octave chance limit (a red team's false PASS). The largest
    error against eager's flags it, the element's noise band confirms it; the correct compile passes."""
    target = "tests/planted/cases.py:wide_mlp"
    r = check(target, backend=PLANTED + "largest_weight_grad_element_off", dtype="bf16", train=True)
    failed = [row for row in r.rows if not row.verdict.passed]
    assert r.exit_code == 1 and [row.name for row in failed] == ["grad.fc1.weight"], [row.name for row in failed]
    assert [f.split(" ", 1)[0] for f in failed[0].verdict.failed_checks] == ["max_abs"], failed[0].verdict.message
    assert "beyond eager's noise band" in failed[0].verdict.message
    assert check(target, dtype="bf16", train=True).exit_code == 0


def test_an_offset_within_the_tolerance_of_eager_passes_and_says_the_golden_check_would_fail():
    """2e-3 added after a bf16 layer norm: within atol (5e-3) of eager everywhere, so the policy's tolerance
    decides (PASS), and the message names the offset the golden check found: honest, never silent."""
    r = check("tests/planted/cases.py:norm_residual", backend=PLANTED + "norm_output_offset", dtype="bf16")
    assert r.exit_code == 0 and r.rows[0].verdict.code == "within_tolerance", r.rows[0].verdict.message
    message = r.rows[0].verdict.message
    assert "the golden checks alone would fail" in message and "; offset_error " in message, message


def test_more_calls_catch_an_artifact_wrong_only_after_warm_up():
    """Four calls cannot see an artifact that goes wrong from its fifth call; --calls N makes N calls and
    judges every result that differs from the first call's. A correct backend stays quiet with more calls."""
    target = "models/mlp.py:build"
    assert check(target, backend=PLANTED + "wrong_after_warmup").exit_code == 0  # what four calls see
    r = check(target, backend=PLANTED + "wrong_after_warmup", calls=6)
    failed = [row for row in r.rows if not row.passed]
    assert r.exit_code == 1 and failed and failed[0].verdict.code == "nondeterministic_compiled"
    assert "call 5 of 6" in failed[0].verdict.message
    assert check(target, backend="aot_eager", calls=6).exit_code == 0
    with pytest.raises(TargetError, match="at least 4"):
        check(target, backend="aot_eager", calls=3)


@pytest.mark.parametrize("backend,code", [("baked_first_mask", 1), ("aot_eager", 0)])
def test_a_mask_baked_from_the_first_call_fails_on_the_rolled_call(backend, code):
    """Only the rolled call sees another mask: judged against eager's call there, a stale mask fails."""
    r = check("tests/planted/cases.py:masked_scores", backend=(PLANTED + backend) if code else backend)
    assert r.exit_code == code, [(row.name, row.verdict.code) for row in r.rows]
    if code:
        assert r.rows[0].verdict.code == "rolled_call_worse"


def test_decisions_narrow_what_the_rolled_call_is_judged_on():
    """A user backend's graphs carry no decision taps, so compiled's choices on the rolled inputs are unknown:
    a relu or max-pool near-tie moves gradients, so there the rolled call's outputs are judged, its gradients
    not; a selection (top-k) moves whole rows: bits only. (A registered backend's choices are followed:
    tests/check/test_rolled_choices.py.)"""
    r = check("models/conv_bn_relu.py:build", backend=PLANTED + "third_call_race", train=True)
    failed = {row.name: row.verdict.code for row in r.rows if not row.passed}
    assert r.exit_code == 1 and failed == {"output": "rolled_call_worse"}, failed
    assert any("is judged on its outputs only" in n for n in r.notes)
    quiet = check("tests/planted/cases.py:routed", backend=PLANTED + "unchanged", train=True)
    assert quiet.exit_code == 0 and any("is judged by its bits only" in n for n in quiet.notes)


@pytest.mark.parametrize("target,train", [("all_inf", False), ("inf_and_nan", False), ("inf_gradient", True)])
def test_no_finite_value_anywhere_is_exit_2(target, train):
    r = check(f"tests/planted/cases.py:{target}", backend="aot_eager", train=train)
    assert r.exit_code == 2
    bad = [row for row in r.rows if row.verdict.status is Status.ERROR]
    assert bad and all(row.verdict.code in ("golden_no_finite", "golden_all_nan") for row in bad)
    if train:
        assert [row.name for row in bad] == ["grad.w"]


@pytest.mark.parametrize("backend,code", [("in_fp64", "follows_float_ties"), ("flip_some_bools", "exact_mismatch")])
def test_a_mask_made_from_floats_is_judged_against_the_golden(backend, code):
    """A compile more accurate than eager (fp64 inside) moves a bf16 mask's near-ties onto the golden's: not
    a failure; a mask wrong far beyond the ties still fails."""
    r = check("tests/planted/cases.py:signs_of_features", backend=PLANTED + backend, dtype="bf16")
    mask = next(row for row in r.rows if row.dtype == "bool")
    assert mask.verdict.code == code, mask.verdict.message
    assert r.exit_code == (0 if code == "follows_float_ties" else 1)


def test_mixed_int_bool_float_outputs():
    r = check("tests/planted/cases.py:int_and_float", backend="aot_eager")
    assert [row.dtype for row in r.rows] == ["int64", "bool", "float32"]
    assert r.passed


@pytest.mark.parametrize("target,code", [
    ("tests/planted/cases.py:empty_output", "empty"), ("tests/planted/cases.py:all_nan", "golden_all_nan"),
])
def test_bad_outputs_give_error_exit_2(target, code):
    r = check(target, backend="eager")
    assert r.rows[0].verdict.code == code and r.rows[0].verdict.status is Status.ERROR and r.exit_code == 2


@pytest.mark.parametrize("target,match", [
    ("tests/planted/cases.py:returns_nothing", "returned no tensors"),
    ("tests/planted/cases.py:builder_returns_none", "returned nothing"),
    ("tests/planted/cases.py:no_such_fn", "has no attribute"),
    ("tests/missing.py:build", "not found"),
    ("models/mlp.py", "expected FILE.py:NAME"),
])
def test_bad_targets_raise_target_error(target, match):
    with pytest.raises(TargetError, match=match):
        check(target, backend="eager")


def test_movement_model_is_checked_bitwise():
    r = check("models/data_movement.py:build", backend="inductor", dtype="bf16")
    assert r.movement_only and r.passed
    assert all(row.verdict.code == "bitwise_equal" for row in r.rows)


def test_movement_rule_catches_a_single_flipped_bit():
    r = check("models/data_movement.py:build", backend=PLANTED + "flip_one_bit")
    assert r.rows[0].verdict.code == "exact_mismatch" and "data movement" in r.rows[0].verdict.message


# every dtype on the cheap models; the two that compile for half a minute each in fp32 and bf16 only (fp16 takes
# bf16's path through the check with another policy row, and the cheap models still run it)
REFERENCE_MODELS = [(t, d) for t in ("models/mlp.py:build", "models/data_movement.py:build") for d in ("fp32", "fp16", "bf16")] \
    + [(t, d) for t in ("fusecheck/builtin/transformer_block.py:build", "models/conv_bn_relu.py:build") for d in ("fp32", "bf16")]


@pytest.mark.slow
@pytest.mark.parametrize(("target", "dtype"), REFERENCE_MODELS)
def test_inductor_passes_on_reference_models(target, dtype):
    """train=True compiles forward and backward: outputs and every gradient are judged."""
    r = check(target, backend="inductor", dtype=dtype, train=True)
    assert r.passed, [(row.name, row.verdict.message) for row in r.rows if not row.passed]
    assert len(r.graphs) >= 1 and r.compiled_repeatable


@pytest.mark.slow
def test_inductor_inference_path_passes():
    r = check("fusecheck/builtin/transformer_block.py:build", backend="inductor", dtype="bf16")
    assert r.passed and r.graphs[0].n_nodes > 10


@pytest.mark.parametrize("target", ["tests/planted/cases.py:mutates_input", "tests/planted/cases.py:mutates_buffer"])
def test_mutating_models_start_every_run_from_the_same_state(target):
    """Runs must not see each other's in-place updates: eager is judged on the pristine inputs every time."""
    r = check(target, backend="aot_eager")
    assert r.passed and r.eager_repeatable
    assert any(row.name.startswith("mutated.") for row in r.rows)
    bad = check(target, backend=PLANTED + "shift_outputs")
    assert bad.status == "FAIL" and bad.rows[0].verdict.code == "worse_than_eager"


@pytest.mark.parametrize("target", ["tests/planted/cases.py:cache_persistent", "tests/planted/cases.py:cache_non_persistent"])
def test_a_model_reading_its_own_cache_is_judged_from_the_same_state_everywhere(target):
    """Eager, compiled and the golden all start from the cache as it was: the golden must not copy the
    model after the compiled runs updated it, and non-persistent buffers are reset too."""
    r = check(target, backend="aot_eager")
    assert r.passed and r.eager_repeatable
    out = r.rows[0]
    assert out.reference_vs_golden.rmse < 1e-6  # eager and golden saw the same cache
    bad = check(target, backend=PLANTED + "shift_outputs")
    assert bad.rows[0].verdict.code == "worse_than_eager"


@pytest.mark.parametrize("target,mutated", [("tests/planted/cases.py:mutates_input", "mutated.input[0]"),
                                            ("tests/planted/cases.py:mutates_buffer", "mutated.state.running"),
                                            ("tests/planted/cases.py:cache_non_persistent", "mutated.state.cache"),
                                            ("tests/planted/cases.py:writes_kwarg", "mutated.kwargs['out']"),
                                            ("tests/planted/cases.py:attribute_ema", "mutated.state.ema")])
def test_lost_in_place_update_fails(target, mutated):
    r = check(target, backend=PLANTED + "drop_mutations")
    row = next(row for row in r.rows if row.name == mutated)
    assert not row.passed and r.status == "FAIL"


@pytest.mark.parametrize("target,state", [("tests/planted/cases.py:attribute_ema", "mutated.state.ema"),
                                          ("tests/planted/cases.py:attribute_cache", "mutated.state.k_cache"),
                                          ("tests/planted/cases.py:no_param_cache", "mutated.state.k_cache"),
                                          ("tests/planted/cases.py:shared_cache", "mutated.state.a.cache")])
def test_state_in_plain_attributes_is_reset_between_runs_and_judged(target, state):
    """A cache or EMA held in a plain attribute (not a buffer) was neither reset nor judged: eager drifted
    between its runs, was called nondeterministic, and that drift absorbed a +0.3 shift (PASS)."""
    r = check(target, backend="aot_eager")
    assert r.passed and r.eager_repeatable and state in {row.name for row in r.rows}
    bad = check(target, backend=PLANTED + "shift_outputs")
    assert bad.status == "FAIL" and bad.rows[0].verdict.code == "worse_than_eager"


def test_buffers_are_state_once_and_slots_a_call_fills_are_emptied_again():
    """A buffer is not also a plain attribute (`_buffers` is nn.Module's own); a cache that starts as None
    and a list that collects features are put back before each run; state only eager leaves is named."""
    r = check("tests/planted/cases.py:cache_non_persistent", backend="aot_eager")
    assert [row.name for row in r.rows if row.name.startswith("mutated.")] == ["mutated.state.cache"]
    filled = check("tests/planted/cases.py:fills_vacant_slots", backend="aot_eager")
    assert filled.passed and filled.eager_repeatable, [(row.name, row.verdict.code) for row in filled.rows]
    assert {"mutated.state.cos_cached", "mutated.state.features[0]"} <= {row.name for row in filled.rows}
    one_sided = check("tests/planted/cases.py:eager_only_state", backend="aot_eager")
    assert one_sided.passed and any("not judged: state.last_attn" in n for n in one_sided.notes)
    opaque = check("tests/planted/cases.py:holds_cache_object", backend="aot_eager")
    assert any("not reset between runs nor judged: cache (_Cache)" in n for n in opaque.notes), opaque.notes


def test_eager_noise_is_absorbed_not_blamed_on_the_compiler():
    r = check("tests/planted/cases.py:noisy_eager", backend="aot_eager")
    assert not r.eager_repeatable and not r.compiled_repeatable  # both move: said, not blamed
    row = r.rows[0]
    assert row.passed and row.verdict.code != "nondeterministic_compiled"
    assert any("eager is not bitwise repeatable" in n for n in row.notes)
    assert any("eager is nondeterministic too" in n for n in row.notes)


def test_a_target_that_draws_random_numbers_is_refused_not_judged():
    """Eager, compiled and golden would draw different numbers: any verdict would be noise against noise."""
    with pytest.raises(TargetError, match="draws random numbers"):
        check("tests/planted/cases.py:draws_noise", backend="aot_eager")


def test_tensors_inside_a_dataclass_output_are_judged():
    r = check("tests/planted/cases.py:returns_dataclass", backend="aot_eager")
    assert {"output[1]['logits']", "output[1]['extra']"} <= {row.name for row in r.rows} and r.passed
    bad = check("tests/planted/cases.py:returns_dataclass", backend=PLANTED + "shift_outputs")
    assert not next(row for row in bad.rows if row.name == "output[1]['logits']").passed


def test_an_object_holding_tensors_is_named_as_not_compared():
    r = check("tests/planted/cases.py:returns_plain_object", backend="aot_eager")
    assert any("not compared: output[1] (Holder)" in n for n in r.notes)


def test_python_numbers_in_the_output_and_keyword_input_gradients_are_judged():
    """A `.item()` among the outputs was dropped silently (a 1% error passed), and a keyword input's gradient
    was never computed: every produced result is a row now; a string is named as not compared."""
    target = "tests/planted/cases.py:numbers_and_keywords"
    r = check(target, backend="aot_eager", train=True)
    names = {row.name for row in r.rows}
    assert {"output['score']", "output['count']", "output['positive']", "grad.kwargs['scale']"} <= names, names
    assert r.passed and any("not compared: output['label'] (str)" in n for n in r.notes)
    bad = check(target, backend=PLANTED + "scale_float_outputs")
    assert next(row for row in bad.rows if row.name == "output['score']").verdict.code == "worse_than_eager"
    bad = check(target, backend=PLANTED + "scale_float_outputs", train=True)
    assert not next(row for row in bad.rows if row.name == "grad.kwargs['scale']").passed


def test_a_compiled_call_that_hands_back_the_previous_call_s_results_fails():
    """Two calls on the same inputs cannot tell a stale result from a right one: a call on other inputs (the
    same tensors rolled) comes between, then the first inputs again, and that run is judged."""
    r = check("models/mlp.py:build", backend=PLANTED + "previous_call_outputs")
    assert r.status == "FAIL" and not r.compiled_repeatable, [row.verdict.message for row in r.rows]
    assert "third (after a call on other inputs)" in r.rows[0].verdict.message
    assert check("models/mlp.py:build", backend="aot_eager").passed


def test_a_compiled_call_that_returns_its_first_result_forever_fails():
    """Right on every call with the first inputs: only its unchanged bits on the rolled inputs, where eager's
    result moved beyond tolerance, tell."""
    r = check("models/mlp.py:build", backend=PLANTED + "first_call_outputs")
    assert r.exit_code == 1 and r.rows[0].verdict.code == "ignores_inputs", [row.verdict.message for row in r.rows]


def test_eager_moving_by_a_tie_the_roll_changed_does_not_name_an_unchanged_compiled_result():
    """A bf16 max over a sequence: rolling the ids leaves the exact result where it was, but eager breaks ties
    by position and its gradients move; a compile in fp64 has no ties and gives the same bits on both calls,
    no further from eager's rolled result than from its first: not a cache (found by a red team)."""
    r = check("tests/planted/cases.py:pooled_tokens", backend=PLANTED + "in_fp64", dtype="bf16", train=True)
    assert r.exit_code == 0, [(row.name, row.verdict.code) for row in r.rows if not row.passed]


def test_an_unchanged_result_closer_to_eager_s_first_call_is_named_and_one_closer_to_its_rolled_call_is_not():
    from fusecheck.check.rolled import ignoring_inputs
    from fusecheck.policy import Policy
    gen = torch.Generator().manual_seed(0)
    e1 = torch.randn(256, generator=gen)
    e2 = e1.clone()
    e2[:8] += 1.0  # eager moved on 8 elements
    first, rolled = {"output": e1}, {"output": e2}
    stale = ignoring_inputs(Policy(), first, rolled, {"output"}, {"output": e1.clone()})
    assert list(stale) == ["output"]  # the first call's result kept: right there, wrong on the rolled inputs
    off = e1.clone()
    off[100:140] += 0.5  # a cache whose first result already differed from eager elsewhere: still named
    assert list(ignoring_inputs(Policy(), first, rolled, {"output"}, {"output": off})) == ["output"]
    invariant = e2.clone()
    invariant[8:12] += 1.0  # where eager moved, as its rolled result: not a cache
    assert ignoring_inputs(Policy(), first, rolled, {"output"}, {"output": invariant}) == {}
    assert list(ignoring_inputs(Policy(), first, rolled, {"output"})) == ["output"]  # without it: as before
    tiny = {"output": torch.tensor([1.0, 2.0, 3.0, 4.0])}
    moved = {"output": torch.tensor([1.0, 2.5, 3.0, 4.0])}
    stale_tiny = torch.tensor([1.5, 2.0, 3.0, 4.0])  # one element off eager already, the moved one cached
    assert list(ignoring_inputs(Policy(), tiny, moved, {"output"}, {"output": stale_tiny})) == ["output"]


def test_an_unchanged_result_where_eager_moved_only_within_its_own_error_is_not_named():
    """Eager's move between the calls within twice its largest error against the golden (a sum the roll only
    reorders: the exact result need not change) is no evidence of a cache; beyond it, it is."""
    from types import SimpleNamespace

    from fusecheck.check.rolled import Ignoring, within_eager_noise
    from fusecheck.policy import Policy
    eager_error = SimpleNamespace(max_abs=0.03, numel=4096)
    assert within_eager_noise(Ignoring("", 0.05), eager_error, Policy())
    assert not within_eager_noise(Ignoring("", 0.07), eager_error, Policy())  # ratio 2 from 1000 elements
    assert within_eager_noise(Ignoring("", 0.07), SimpleNamespace(max_abs=0.03, numel=8), Policy())  # 3 below
    assert not within_eager_noise(Ignoring("", 0.5), eager_error, Policy())
    assert not within_eager_noise(Ignoring("", 0.05), None, Policy())  # no golden: the move decides, as before


@pytest.mark.parametrize("backend", ["aot_eager", PLANTED + "first_call_outputs"])
def test_a_result_the_roll_does_not_change_is_not_named(backend):
    """amax over the rolled dimension is the same bits on both inputs, a sum moves by rounding only: a cache
    that hands them back is right, and eager stays within tolerance of itself."""
    r = check("tests/planted/cases.py:max_over_last_dim", backend=backend)
    assert r.exit_code == 0, [(row.name, row.verdict.message) for row in r.rows]


def test_the_run_on_rolled_inputs_takes_its_own_gradients_when_its_output_shape_differs():
    r = check("tests/planted/cases.py:length_from_input", backend="aot_eager", train=True)
    assert r.passed and not any("rolled" in n for n in r.notes), r.notes


def test_an_empty_result_beside_judged_ones_passes_and_alone_is_an_error():
    r = check("tests/planted/cases.py:with_empty_cache", backend="aot_eager")
    rows = {row.name: row.verdict.code for row in r.rows}
    assert r.exit_code == 0 and rows["output['past']"] == "empty_equal", rows
    bad = check("tests/planted/cases.py:with_empty_cache", backend=PLANTED + "shift_outputs")
    assert bad.exit_code == 1                                   # the judged result still fails
    assert check("tests/planted/cases.py:empty_output", backend="eager").exit_code == 2   # nothing else: no verdict


def test_train_with_a_model_that_updates_its_input_in_place():
    r = check("tests/planted/cases.py:scales_input_in_place", backend="aot_eager", train=True)
    assert r.passed and {"grad.input[0]", "mutated.input[0]"} <= {row.name for row in r.rows}


def test_a_backend_that_drops_autograd_is_a_tool_error_naming_it():
    from fusecheck.check import CompileError
    with pytest.raises(CompileError, match="autograd graph was dropped"):
        check("models/mlp.py:build", backend=PLANTED + "detach_outputs", train=True)



@pytest.mark.parametrize("target", ["expanded_mask", "growing_cache", "reseeds_itself", "branches_with_cond",
                                    "casts_to_fp8"])
def test_models_that_once_broke_the_harness_are_judged(target):
    """Expanded or reassigned buffers, a forward that reseeds itself, torch.cond in the golden, an fp8 output."""
    r = check(f"tests/planted/cases.py:{target}", backend="aot_eager")
    assert r.passed, [(row.name, row.verdict.message) for row in r.rows]


def test_a_user_backend_sees_the_models_own_graph():
    """The decision taps (which append choices to the graph) are for registered backends: a user backend gets
    the graph dynamo captured, so the naive `lambda *a: (fused(*a),)` of a fused-op author works."""
    from fusecheck.case import Case

    class SoftmaxTimesMax(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x, -1) * x.max(-1, keepdim=True).values

    seen = []

    def naive(gm, example_inputs):
        seen.append(len([n for n in gm.graph.nodes if n.op == "output"][0].args[0]))
        return lambda *a: (SoftmaxTimesMax()(*a),)

    r = run_check(Case(SoftmaxTimesMax(), (torch.randn(8, 32),), "softmax_max"), backend=naive)
    assert r.exit_code == 0 and seen == [1]
    assert any("user backend receives the model's own graph" in n for n in r.notes)


def test_the_table_counts_differing_elements_zero_on_a_bitwise_equal_row():
    from fusecheck.report.table import format_report
    r = check("models/mlp.py:build", backend="aot_eager")
    line = next(ln for ln in format_report(r).splitlines() if ln.startswith("output ") and "PASS" in ln)
    assert "bitwise_equal" in line and " 0 " in line and "yes" not in line


_SKIPPED_BY_DYNAMO = '''
import torch
from fusecheck.case import Case

class Tagger(torch.nn.Module):
    """dynamo skips a frame holding an LSTM whole: nothing reaches the backend"""
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 8, batch_first=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.lstm(x)[0])

def build():
    torch.manual_seed(0)
    return Case(Tagger(), (torch.randn(2, 5, 8),), "tagger")
'''


def test_a_model_dynamo_never_compiles_is_an_error_not_a_pass(tmp_path, capsys):
    """No graph reached the backend: compiled ran eagerly, and a PASS would judge eager against itself.
    Exit 3, one line naming dynamo's reason, and the JSON says ERROR."""
    import json

    from fusecheck.cli.main import main
    target = tmp_path / "tagger.py"
    target.write_text(_SKIPPED_BY_DYNAMO)
    out = tmp_path / "r.json"
    assert main(["check", f"{target}:build", "--backend", "aot_eager", "--json", str(out), "-q"]) == 3
    err = capsys.readouterr().err
    assert "never called on 'tagger'" in err and "LSTM" in err and "Traceback" not in err
    assert json.loads(out.read_text())["status"] == "ERROR"


def test_an_exact_row_says_why_it_is_exact():
    """A bool output is exact by its dtype; only a movement graph's float outputs are exact by the graph (the
    message said 'pure data movement' for a bool derived from floats)."""
    from fusecheck.check.rows import RowJudge
    from fusecheck.policy import Policy
    j = RowJudge({"output": torch.tensor([True, False])}, {"output": torch.tensor([True, True])}, Policy())
    j.judge("output", None)
    assert "integer/bool outputs must be exact" in j.rows["output"].verdict.message
    j = RowJudge({"output": torch.zeros(3)}, {"output": torch.ones(3)}, Policy(), exact=True)
    j.judge("output", None)
    assert "pure data movement" in j.rows["output"].verdict.message
