"""The comparison core: metric definitions, chunking, and the verdict on constructed tensors."""
import functools
import math

import pytest
import torch

from fusecheck.compare import Status, compare, pair_metrics
from fusecheck.policy import Policy


@pytest.fixture
def golden():
    return torch.randn(4096, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def test_ulp_matches_msprobe_definition():
    # bf16 has 7 mantissa bits: around 1.0 one ULP is 2^-7.
    b = torch.tensor([1.0, 1.0, 4.0, 0.0], dtype=torch.float64)
    a = torch.tensor([1.0 + 2**-7, 1.0 + 3 * 2**-7, 4.0 + 2**-5, 2**-133], dtype=torch.float64)
    m = pair_metrics(a, b, ulp_dtype=torch.bfloat16)
    assert m.ulp_max == pytest.approx(3.0)
    # |B|=0 uses min_eb=-126: 2^-133 * 2^(7+126) = 1
    assert m.ulp_mean == pytest.approx((1 + 3 + 1 + 1) / 4)
    assert m.ulp_gt1_ratio == pytest.approx(0.25)


def test_relative_error_and_cosine_definitions():
    b = torch.tensor([2.0, -4.0, 1.0], dtype=torch.float64)
    a = torch.tensor([2.2, -4.0, 0.5], dtype=torch.float64)
    m = pair_metrics(a, b)
    assert m.max_rel == pytest.approx(0.5)
    assert m.mean_rel == pytest.approx((0.1 + 0 + 0.5) / 3)
    assert m.max_abs == pytest.approx(0.5)
    assert m.rmse == pytest.approx(math.sqrt((0.04 + 0.25) / 3))
    assert m.cosine == pytest.approx(float(a @ b / (a.norm() * b.norm())))
    assert m.one_thousandth_ratio == pytest.approx(1 / 3)


def test_chunked_equals_single_pass(golden):
    a = golden.to(torch.bfloat16)
    b = (golden * 1.001).to(torch.bfloat16)
    whole = compare(a, b, golden, chunk_elems=1 << 30)
    chunked = compare(a, b, golden, chunk_elems=97)
    for k, v in whole.vs_golden.values.items():
        assert chunked.vs_golden.values[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    assert chunked.verdict.code == whole.verdict.code


def test_non_contiguous_inputs_are_chunked_by_rows(golden):
    g = golden.reshape(64, 64).t()
    a = g.to(torch.float32)
    c = compare(a, a.clone(), g, chunk_elems=128)
    assert c.verdict.code == "bitwise_equal"
    assert compare(a * 1.01, a, g, chunk_elems=128).verdict.status is Status.FAIL


def test_closer_to_golden_passes_even_when_most_bits_differ(golden):
    eager = (golden * (1 + 2e-2)).to(torch.bfloat16)          # biased eager
    compiled = golden.to(torch.bfloat16)                        # correctly rounded
    c = compare(compiled, eager, golden)
    differ = c.vs_reference.numel - c.vs_reference.bitwise_equal
    assert differ > 0.5 * c.vs_reference.numel
    assert c.verdict.status is Status.PASS and c.verdict.code == "not_worse_than_eager"
    assert c.error_ratio < 1


def test_worse_than_eager_fails_with_the_failing_checks(golden):
    eager = golden.to(torch.bfloat16)
    compiled = (golden * (1 + 3e-2)).to(torch.bfloat16)
    c = compare(compiled, eager, golden)
    assert c.verdict.status is Status.FAIL and c.verdict.code == "worse_than_eager"
    assert any(f.startswith("rmse") for f in c.verdict.failed_checks)


def test_within_tolerance_without_golden():
    x = torch.randn(100)
    assert compare(x + 1e-7, x).verdict.code == "within_tolerance"
    assert compare(x + 1e-3, x).verdict.code == "outside_tolerance"


def test_nan_only_in_compiled_fails(golden):
    eager = golden.float()
    compiled = eager.clone()
    compiled[7] = float("nan")
    c = compare(compiled, eager, golden)
    assert c.verdict.code == "nan_inf_mismatch" and "compiled has NaN/Inf" in c.verdict.message


def test_inf_where_golden_has_inf_is_accepted_when_eager_lost_it():
    golden = torch.tensor([1.0, math.inf, 3.0], dtype=torch.float64)
    eager = torch.tensor([1.0, 65504.0, 3.0], dtype=torch.float16)  # eager saturated wrongly
    compiled = torch.tensor([1.0, math.inf, 3.0], dtype=torch.float16)
    assert compare(compiled, eager, golden).verdict.status is Status.PASS


@pytest.mark.parametrize("seed", range(4))
def test_where_eager_overflows_and_the_golden_does_not_compiled_is_judged_on_the_rest(seed):
    """Eager's layer norm gives NaN on rows at |x| ~ 5e19 (its variance overflows fp32); the golden and a fused
    kernel stay finite, the kernel with a rough but finite value there. Eager's error at those rows is
    unbounded and left out of its metrics; compiled's must be left out too, or the kernel fails for being better
    than eager. Elsewhere compiled is judged as ever: a planted error there still fails."""
    gen = torch.Generator().manual_seed(seed)
    golden = torch.randn(64, 96, generator=gen, dtype=torch.float64)
    rows = torch.randperm(64, generator=gen)[:8]
    eager = golden.float()
    eager[rows] = float("nan")
    compiled = golden.float()
    compiled[rows] = (golden[rows] * 1.9).float()        # finite, far from the golden where eager has nothing
    c = compare(compiled, eager, golden)
    assert c.passed, c.verdict.message
    assert any("eager is NaN/Inf at 768 position(s) where the golden is finite" in n for n in c.notes), c.notes
    planted = compiled.clone()
    others = torch.ones(64, dtype=torch.bool)
    others[rows] = False
    planted[others] = (golden[others] * (1 + 3e-3)).float()   # ~300x eager's fp32 rounding on every other row
    assert compare(planted, eager, golden).verdict.code == "worse_than_eager"
    compiled[int(torch.nonzero(others)[0]), 0] = float("nan")  # NaN where eager and golden are finite: never hidden
    assert compare(compiled, eager, golden).verdict.code == "nan_inf_mismatch"


def _softmax_case(seed: int, width: int = 64):
    gen = torch.Generator().manual_seed(seed)
    logits = 8 * torch.randn(16, width, dtype=torch.float64, generator=gen)
    golden = logits.softmax(-1)
    return logits, golden, logits.float().softmax(-1)


@pytest.mark.parametrize("seed", range(4))
def test_a_softmax_tail_flushed_to_zero_fails_though_within_tolerance(seed):
    """Probabilities below 1e-6 zeroed (an exp underflowing in a fused softmax): every error is below atol, and
    below the small-value threshold no relative check looks, yet each zeroed element lost all its digits where
    eager kept them (RE ~1e-7). The tolerance shortcut no longer passes it."""
    logits, golden, eager = _softmax_case(seed)
    flushed = torch.where(eager < 1e-6, torch.zeros_like(eager), eager)
    assert (flushed != eager).sum() >= 12 and (flushed - eager).abs().max() < 1e-5
    c = compare(flushed, eager, golden)
    assert c.verdict.code == "worse_than_eager", c.verdict.message
    assert any(f.startswith("digits_lost") for f in c.verdict.failed_checks), c.verdict.message
    assert c.verdict.message.startswith("within rtol=")
    # a correct fused softmax (another order: max, exp, sum in fp32 by hand) passes
    x = logits.float()
    e = torch.exp(x - x.amax(-1, keepdim=True))
    fused = e / e.sum(-1, keepdim=True)
    assert compare(fused, eager, golden).passed
    # in bf16 the check stays out: 1e-3 is a quarter of an ulp there, not a loss of digits
    assert compare(flushed.bfloat16(), eager.bfloat16(), golden).verdict.margins["digits_lost"] == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_elements_eager_loses_too_are_not_counted_against_compiled(seed):
    """A sum with heavy cancellation (a bias gradient whose exact value is near zero): eager and a correct
    reordering both lose the digits of the same kind of elements; compiled's count is judged against eager's."""
    gen = torch.Generator().manual_seed(seed)
    terms = torch.randn(512, 256, dtype=torch.float64, generator=gen) * 1e3
    terms[:, -1] = -terms[:, :-1].sum(-1) + 1e-4 * torch.randn(512, dtype=torch.float64, generator=gen)
    golden = terms.sum(-1)
    eager = terms.float().sum(-1)
    reordered = terms.float().flip(-1).sum(-1)
    c = compare(reordered, eager, golden)
    assert c.vs_golden.digits_lost > 100 and c.reference_vs_golden.digits_lost > 100
    assert "digits_lost" not in " ".join(c.verdict.failed_checks), c.verdict.message


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_integers_and_bools_are_exact(dtype):
    ref = torch.arange(10).to(dtype)
    bad = ref.clone()
    bad[3] = 1 - int(bad[3]) if dtype is torch.bool else 99
    assert compare(ref.clone(), ref).verdict.code == "bitwise_equal"
    v = compare(bad, ref).verdict
    assert v.status is Status.FAIL and v.code == "exact_mismatch" and "1 of 10" in v.message


def _ties(n=4096, eager_off=(3, 50, 900), compiled_off=(7, 51)):
    golden = torch.zeros(n, dtype=torch.bool)
    golden[::3] = True
    eager, compiled = golden.clone(), golden.clone()
    eager[list(eager_off)] ^= True
    compiled[list(compiled_off)] ^= True
    return compiled, eager, golden


def test_bools_made_from_floats_follow_ties_eager_also_misses():
    """Eager's mask differs from the golden's at 3 near-ties; a compile that differs at 2 others is not worse."""
    v = compare(*_ties()).verdict
    assert v.status is Status.PASS and v.code == "follows_float_ties" and "golden at 3" in v.message


@pytest.mark.parametrize("case", ["many_flips", "eager_equals_golden", "following_off", "count_far_off"])
def test_integers_and_bools_stay_exact_where_ties_do_not_explain_them(case):
    from fusecheck.policy import Policy, Ratios
    policy = None
    if case == "many_flips":  # 40 flips against eager's 3: significantly worse
        args = _ties(compiled_off=tuple(range(1, 400, 10)))
    elif case == "eager_equals_golden":  # no float noise reaches the result: exactness decides
        args = _ties(eager_off=())
    elif case == "following_off":
        args, policy = _ties(), Policy(ratios=Ratios(decision_tie=0.0))
    else:  # a count: eager off by 2, compiled off by 9 (more than 2x eager's difference)
        g = torch.tensor(1000)
        args = (g + 9, g + 2, g)
    v = compare(*args, policy=policy).verdict
    assert v.status is Status.FAIL and v.code == "exact_mismatch", v.message


def test_exact_rule_for_data_movement(golden):
    e = golden.float()
    c = e.clone()
    c[0] = torch.nextafter(c[0], torch.tensor(math.inf))
    v = compare(c, e, golden, exact=True, exact_reason="pure data movement").verdict
    assert v.code == "exact_mismatch" and "data movement" in v.message


@pytest.mark.parametrize("result,reference,golden,code", [
    (torch.empty(0), torch.empty(0), torch.empty(0, dtype=torch.float64), "empty"),
    (torch.ones(3), torch.ones(4), None, "shape_mismatch"),
    (torch.ones(3), torch.ones(3, dtype=torch.float64), None, "dtype_mismatch"),
    (torch.ones(3, device="meta"), torch.ones(3), None, "device_mismatch"),
    (torch.ones(3), torch.ones(3), torch.full((3,), math.nan, dtype=torch.float64), "golden_all_nan"),
    (torch.ones(3), torch.ones(3), torch.ones(2, dtype=torch.float64), "golden_shape_mismatch"),
])
def test_bad_inputs_never_pass(result, reference, golden, code):
    c = compare(result, reference, golden)
    assert c.verdict.code == code
    assert c.verdict.status is not Status.PASS


def test_policy_relaxation_changes_the_verdict(golden):
    eager = golden.float()
    compiled = eager * (1 + 5e-5)
    assert compare(compiled, eager, golden).verdict.status is Status.FAIL
    relaxed = Policy.from_mapping({"tolerance": {"fp32": {"rtol": 1e-4, "atol": 1e-4, "reason": "tf32 matmuls"}}}, "t")
    assert compare(compiled, eager, golden, policy=relaxed).verdict.code == "within_tolerance"


def test_complex_outputs_are_judged_on_both_parts():
    e = torch.randn(100, dtype=torch.complex64)
    c = e.clone()
    c.imag += 5
    g = e.to(torch.complex128)
    assert compare(c, e, g).verdict.status is Status.FAIL
    assert compare(e.clone(), e, g).verdict.code == "bitwise_equal"
    assert Policy().tolerance(torch.complex64).rtol == 1e-5


@pytest.mark.parametrize("fill", [math.nan, math.inf])
def test_outputs_without_a_finite_value_never_pass(golden, fill):
    bad = torch.full((4096,), fill)
    assert compare(bad.clone(), bad.clone(), golden).verdict.code == "no_finite_values"
    assert compare(bad.clone(), bad.clone(), golden).verdict.status is Status.ERROR
    assert compare(bad.clone(), golden.float(), golden).verdict.code == "nan_inf_mismatch"


def test_ulp_of_float64_results_is_finite():
    m = pair_metrics(torch.tensor([0.0, 1.0], dtype=torch.float64), torch.tensor([0.0, 1.0 + 1e-9], dtype=torch.float64))
    assert math.isfinite(m.ulp_max) and m.ulp_max > 0


def test_all_nonfinite_golden_in_a_probe_is_judged_by_positions():
    """NaN/Inf propagation probes: every golden element is NaN or Inf; only positions can be compared."""
    golden = torch.tensor([math.inf, -math.inf, math.nan, math.inf], dtype=torch.float64)
    eager = golden.float()
    probe = functools.partial(compare, nonfinite_probe=True)
    assert probe(eager.clone(), eager, golden).verdict.code == "nonfinite_positions_match"
    shuffled = eager[[1, 0, 2, 3]].contiguous()
    assert probe(shuffled, eager, golden).verdict.code == "nan_inf_mismatch"
    payload = eager.clone()
    payload[2] = -payload[2]  # a NaN with another sign bit: not bitwise equal, same positions
    assert probe(payload, eager, golden).verdict.code == "nonfinite_positions_match"
    nan = torch.full((4,), math.nan, dtype=torch.float64)
    assert probe(nan.float(), nan.float(), nan).verdict.code == "nonfinite_positions_match"


def test_compiled_finite_where_eager_and_golden_have_no_finite_value_fails():
    """exp(1000 x) overflows everywhere in eager and the golden: no verdict (exit 2) when compiled overflows too,
    but a compiled run that returns finite numbers there made them up: FAIL, not an error."""
    golden = torch.full((64,), math.inf, dtype=torch.float64)
    eager = golden.float()
    assert compare(eager.clone(), eager, golden).verdict.code == "golden_no_finite"
    made_up = torch.full((64,), 3.4e38)
    c = compare(made_up, eager, golden)
    assert c.verdict.code == "nan_inf_mismatch" and c.verdict.status is Status.FAIL
    assert "64 finite value(s) where eager and the golden have none" in c.verdict.message


@pytest.mark.parametrize("golden", [
    torch.full((64,), math.inf, dtype=torch.float64),                           # exp(1000 x): +Inf everywhere
    torch.tensor([math.inf, -math.inf, math.nan, math.inf], dtype=torch.float64),  # mixed Inf/NaN
    torch.full((64,), math.nan, dtype=torch.float64)])
def test_no_finite_value_anywhere_is_an_error_not_a_pass(golden):
    """Outside a probe, an output with no finite value in eager, compiled and golden has nothing to judge."""
    eager = golden.float()
    row = compare(eager.clone(), eager, golden)
    assert row.verdict.status is Status.ERROR
    assert row.verdict.code in ("golden_no_finite", "golden_all_nan")


def test_small_value_error_counts_are_judged_by_significance():
    from fusecheck.compare.verdict import _count_significantly_worse
    from fusecheck.policy import Ratios

    r = Ratios()
    assert not _count_significantly_worse(5, 4, 2, 2.0, r)      # 5 vs 2: Poisson noise
    assert _count_significantly_worse(50, 4, 2, 2.0, r)         # 50 vs 2: a real excess
    assert _count_significantly_worse(4000, 2000, 1000, 2.0, r)  # large counts: normal approximation
    assert not _count_significantly_worse(2100, 2000, 1000, 2.0, r)


def test_many_more_small_value_errors_than_eager_fail():
    g = torch.rand(20000, dtype=torch.float64) * 2.0**-12  # "small" (|golden| < 2^-10 for bf16) ...
    g[-1] = 1.0  # ... in a tensor whose values reach 1 (below that, thresholds scale with the tensor)
    eager = g.to(torch.bfloat16)
    compiled = eager.clone()
    compiled[:500] += 0.01  # 500 small values with an absolute error above atol
    v = compare(compiled, eager, g).verdict
    assert v.status is Status.FAIL and any(f.startswith("small_value_errors") for f in v.failed_checks)


def test_significance_level_is_a_policy_knob_with_a_reason():
    from fusecheck.policy import PolicyError
    with pytest.raises(PolicyError, match="without a 'reason'"):
        Policy.from_mapping({"ratios": {"small_value_alpha": 0.001}}, "x")  # smaller alpha loosens
    p = Policy.from_mapping({"ratios": {"small_value_alpha": 0.05}}, "x")  # larger alpha: stricter
    assert not p.relaxations[0].loosens


def test_relative_errors_leave_small_values_out_like_msprobe():
    b = torch.tensor([1.0, 2.0, 1e-8], dtype=torch.float64)
    a = torch.tensor([1.001, 2.0, 2e-8], dtype=torch.float64)  # 100% off on a value below 2^-10
    m = pair_metrics(a, b, ulp_dtype=torch.bfloat16, small_threshold=2.0**-10, atol=5e-3)
    assert m.max_rel == pytest.approx(1e-3)
    assert m.mean_rel == pytest.approx(1e-3 / 2)
    assert m.small_value_errors == 0  # judged by absolute error instead: 1e-8 is within atol


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_tensor_of_small_values_is_not_passed_wholesale_by_atol(golden, dtype):
    """bf16 atol is 5e-3: taken literally it passes a gradient around 1e-4 that is 50% off."""
    tiny = golden * 1e-4
    eager, wrong = tiny.to(dtype), (tiny * 1.5).to(dtype)
    c = compare(wrong, eager, tiny)
    assert c.verdict.status is Status.FAIL and c.atol_scaled
    assert c.tolerance.atol < Policy().tolerance(dtype).atol * 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["rounding_noise", "biased_2pct", "closer_to_golden"])
def test_below_unit_scale_the_verdict_does_not_depend_on_magnitude(golden, dtype, kind):
    """Multiplying every tensor by a power of two below 1 changes no verdict (and no metric ratio)."""
    make = {
        "rounding_noise": lambda g: ((g * (1 + 1e-6)).to(dtype), g.to(dtype)),
        "biased_2pct": lambda g: ((g * (1 + 2e-2)).to(dtype), g.to(dtype)),
        "closer_to_golden": lambda g: (g.to(dtype), (g * (1 + 2e-2)).to(dtype)),
    }[kind]
    base = golden / golden.abs().max() * 0.75  # largest magnitude below 1: the scaled regime already
    verdicts = set()
    for k in (0, 6, 14, 30):
        g = base * 2.0**-k
        compiled, eager = make(g)
        c = compare(compiled, eager, g)
        verdicts.add((c.verdict.status, c.verdict.code, round(c.error_ratio or 0, 6)))
    assert len(verdicts) == 1, verdicts


def test_atol_is_never_loosened_above_unit_scale(golden):
    big = golden * 100
    c = compare(big.float() + 1e-3, big.float(), big)
    assert c.tolerance == Policy().tolerance(torch.float32) and not c.atol_scaled


def _with_errors(golden, rel_err_scale, seed):
    gen = torch.Generator().manual_seed(seed)
    return golden + rel_err_scale * golden.abs().max() * torch.randn(golden.shape, generator=gen, dtype=golden.dtype)


def test_one_near_zero_element_does_not_decide_the_mean_relative_error():
    """A 32-element gradient with one cancellation; eager and compiled carry the same kind of absolute
    noise (compiled's 10% larger). The plain mean-RE ratio swings from 0.5 to ~5 with the noise's seed;
    the verdict must not."""
    g = torch.randn(32, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 20
    g[5] = 0.02  # 1/2000 of the tensor's scale
    plain_ratios = []
    for s_eager in range(1, 6):
        for s_compiled in range(6, 12):
            eager, compiled = _with_errors(g, 1e-3, s_eager), _with_errors(g, 1.1e-3, s_compiled)
            c = compare(compiled.float(), eager.float(), g)
            plain_ratios.append(c.vs_golden.mean_rel / c.reference_vs_golden.mean_rel)
            assert c.verdict.status is Status.PASS, (s_eager, s_compiled, c.verdict.message)
    assert sum(r > 2 for r in plain_ratios) >= 10  # the plain ratio-2 rule would have failed these


@pytest.mark.parametrize("n", [32, 4096])
def test_a_systematic_relative_error_fails_on_mean_rel_however_small_the_tensor(n):
    g = torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(4)) + 3  # no near-zero values
    eager = g * (1 + 2e-4 * torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(5)))
    compiled = g * (1 + 1e-3)  # every element 1e-3 off: 5x eager's typical error
    c = compare(compiled.float(), eager.float(), g)
    assert c.verdict.status is Status.FAIL and any(f.startswith("mean_rel") for f in c.verdict.failed_checks)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_outputs_are_judged_in_their_own_format(golden, dtype):
    """fp8 epilogues are fused kernels too; most ops refuse fp8 tensors, so the core must not."""
    g = golden * 4
    eager = g.to(dtype)
    same = compare(eager.clone(), eager, g)
    assert same.verdict.code == "bitwise_equal" and same.dtype == str(dtype).removeprefix("torch.")
    closer = compare(g.to(dtype), (g * 1.1).to(dtype), g)
    assert closer.verdict.status is Status.PASS
    worse = compare((g * 1.3).to(dtype), eager, g)
    assert worse.verdict.status is Status.FAIL and worse.verdict.code == "worse_than_eager"
    m = compare(eager, eager, g).vs_golden
    assert 0.1 < m.ulp_max <= 0.5 + 1e-9  # round-to-nearest: within half an fp8 ULP (in fp32 ULPs: ~2^20)


def test_small_elements_that_lose_their_relative_accuracy_still_fail_max_rel():
    """Eager's error follows each value (rounding of the result), compiled carries a fixed absolute error
    everywhere: on the small elements its errors are several times eager's (what tiny GPT-2's ln_1.bias
    gradient shows in bf16 --train)."""
    gen = torch.Generator().manual_seed(1)
    g = torch.randn(512, dtype=torch.float64, generator=gen) * 0.7
    g[7] = 0.0018
    eager = g * (1 + 2e-3 * torch.randn(512, dtype=torch.float64, generator=gen))
    compiled = g + 0.0035 * torch.randn(512, dtype=torch.float64, generator=gen)
    compiled[7] = g[7] - 0.0021
    c = compare(compiled.float(), eager.float(), g)
    assert c.verdict.status is Status.FAIL
    assert any(f.startswith("max_rel") for f in c.verdict.failed_checks), c.verdict.message


def test_a_sign_flip_on_the_small_values_of_a_wide_range_tensor_fails():
    """Values around 1e3 with a few around 0.02 (outlier channels): eager's noise at 1e3 must not excuse
    a 200% error at 0.02."""
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(4096, dtype=torch.float64, generator=gen) * 1000
    g[:8] = torch.rand(8, dtype=torch.float64, generator=gen) * 0.02 + 0.01
    eager = g.to(torch.bfloat16)
    compiled = eager.clone()
    compiled[:8] = -compiled[:8]
    c = compare(compiled, eager, g)
    assert c.verdict.status is Status.FAIL
    assert any(f.startswith("max_rel") for f in c.verdict.failed_checks)


def test_eleven_exact_zeros_written_as_quarter_fail_on_small_value_max_abs():
    """The small-value count needs ~12 errors to be significant against eager's 0; magnitude decides."""
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(1 << 16, dtype=torch.float64, generator=gen)
    g[:11] = 0.0
    eager = g.to(torch.bfloat16)
    compiled = eager.clone()
    compiled[:11] = 0.25
    c = compare(compiled, eager, g)
    assert c.verdict.status is Status.FAIL
    assert any(f.startswith("small_value_max_abs") for f in c.verdict.failed_checks)


def test_a_tensor_that_is_exactly_zero_in_eager_and_golden_admits_no_error():
    g = torch.zeros(64, 64, dtype=torch.float64)
    eager = g.to(torch.bfloat16)
    c = compare(eager + 0.004, eager, g)
    assert c.verdict.status is Status.FAIL and c.tolerance.atol == 0
    assert compare(eager.clone(), eager, g).verdict.code == "bitwise_equal"


@pytest.mark.parametrize("position", ["near_zero", "large"])
def test_one_wrong_element_fails_max_rel(golden, position):
    """A single wrong element, near zero or not, is too little for RMSE or the mean: MaxRel must catch it."""
    eager = golden.float()
    compiled = eager.clone()
    i = int(golden.abs().argmin()) if position == "near_zero" else int(golden.abs().argmax())
    compiled[i] += 3e-5 if position == "near_zero" else 3e-5 * golden[i].abs().item() * 1e3
    c = compare(compiled, eager, golden)
    assert c.verdict.status is Status.FAIL
    assert any(f.startswith("max_rel") for f in c.verdict.failed_checks), c.verdict.message


def test_small_entries_of_a_noisy_gradient_are_judged_against_its_noise():
    """tiny T5, bf16 --train, wi.weight: errors ~0.1 on every element; the few entries below the small-value
    threshold are off by ~0.3 in compiled and by ~0.02 in eager (luck). Compiled's RMSE is lower."""
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(8192, dtype=torch.float64, generator=gen) * 5
    g[:3] = 1e-7  # below the fp32 small-value threshold (2^-20)
    eager = g + 0.1 * torch.randn(8192, dtype=torch.float64, generator=gen)
    compiled = g + 0.065 * torch.randn(8192, dtype=torch.float64, generator=gen)
    eager[:3], compiled[:3] = g[:3] + 0.02, g[:3] + 0.3
    c = compare(compiled.float(), eager.float(), g)
    assert c.vs_golden.small_value_max_abs > 10 * c.reference_vs_golden.small_value_max_abs
    assert c.verdict.status is Status.PASS, c.verdict.message


def test_the_finite_and_nan_scans_look_past_the_first_chunk():
    """The structural scans stop at the first chunk that answers; one that looked at the first chunk only
    would call a tensor whose only finite value comes late all-NaN (a false error, or a missed one)."""
    n = 3 * (1 << 16) + 5  # CPU chunks of 64 Ki: the finite values sit in the last, short one
    golden = torch.full((n,), math.nan, dtype=torch.float64)
    golden[-3:] = 1.0
    late = golden.float()
    c = compare(late.clone(), late, golden)
    assert c.verdict.code not in ("golden_all_nan", "no_finite_values", "nan_inf_mismatch")
    assert c.passed
    golden[-3:] = math.nan
    assert compare(late.clone(), late, golden).verdict.code == "golden_all_nan"


def test_a_pair_asked_twice_is_walked_once_with_the_same_metrics(monkeypatch):
    """compare(x, x, golden) (eager's own error, measured by the decisions' golden passes) asks for
    (x, golden) as vs_golden and as reference_vs_golden: one walk serves both, with the values of two."""
    from fusecheck.compare import cores
    g = torch.linspace(-2.0, 2.0, 1000, dtype=torch.float64)
    x = (g * (1 + 1e-3 * torch.sin(g * 97))).float()
    walked = []
    real_walk = cores.walk
    monkeypatch.setattr(cores, "walk", lambda tensors, pairs, *a: walked.append(pairs) or real_walk(tensors, pairs, *a))
    same = compare(x, x, g)
    twin = compare(x, x.clone(), g)
    assert walked[0] == ((0, 0), (0, 1)) and len(walked[1]) == 3
    assert same.vs_golden.values == same.reference_vs_golden.values == twin.vs_golden.values
    assert same.vs_reference.values == twin.vs_reference.values
