import pytest
import torch

from fusecheck.policy import Policy, PolicyError


def test_defaults_match_the_brief():
    p = Policy()
    assert (p.tolerance(torch.float32).rtol, p.tolerance(torch.float16).rtol, p.tolerance(torch.bfloat16).rtol) == (1e-5, 1e-3, 5e-3)
    assert p.tolerance(torch.int32).exact and p.tolerance(torch.bool).exact
    assert p.relaxations == ()


def test_loosening_without_reason_is_refused():
    with pytest.raises(PolicyError, match="without a 'reason'"):
        Policy.from_mapping({"tolerance": {"bf16": {"rtol": 1e-2}}}, "x")
    with pytest.raises(PolicyError, match="without a 'reason'"):
        Policy.from_mapping({"ratios": {"rmse": 3.0}}, "x")


def test_tightening_needs_no_reason_but_is_recorded():
    p = Policy.from_mapping({"ratios": {"max_rel": 5.0}}, "x")
    assert p.ratios.max_rel == 5.0
    assert [r.loosens for r in p.relaxations] == [False]


def test_relaxation_is_kept_with_its_reason():
    p = Policy.from_mapping({"ratios": {"rmse": 3.0, "reason": "fp16 softmax upstream bug #123"}}, "x")
    (r,) = p.relaxations
    assert r.loosens and "RELAXED ratios.rmse: 2.0 -> 3.0 (fp16 softmax upstream bug #123)" == r.describe()
    assert p.to_dict()["relaxations"][0]["reason"] == "fp16 softmax upstream bug #123"


def test_load_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.fusecheck.tolerance.bf16]\nrtol = 1e-2\natol = 1e-2\nreason = "known fused-rmsnorm rounding"\n')
    p = Policy.load(search_from=tmp_path)
    assert p.tolerance(torch.bfloat16).rtol == 1e-2
    assert "pyproject.toml" in p.source and len(p.relaxations) == 2


def test_bad_policy_files(tmp_path):
    with pytest.raises(PolicyError, match="not found"):
        Policy.load(tmp_path / "missing.toml")
    bad = tmp_path / "p.toml"
    bad.write_text("[tolerance.fp8]\nrtol = 1\n")
    with pytest.raises(PolicyError, match="unknown floating dtype"):
        Policy.load(bad)
    bad.write_text("colour = 'red'\n")
    with pytest.raises(PolicyError, match="unknown policy keys"):
        Policy.load(bad)


@pytest.mark.parametrize("data", [
    {"tolerance": {"fp32": {"rtol": float("nan"), "reason": "x"}}},
    {"ratios": {"rmse": float("nan"), "reason": "x"}},
    {"ratios": {"max_rel": float("inf"), "reason": "x"}},
    {"tolerance": {"bf16": {"atol": -1.0}}},
])
def test_non_finite_or_negative_numbers_are_refused(data):
    with pytest.raises(PolicyError, match="finite number >= 0"):
        Policy.from_mapping(data, "x")


@pytest.mark.parametrize("data, says", [
    ({"ratios": {"rmse": True, "reason": "r"}}, "ratios.rmse = True is not a number"),   # TOML true read as 1.0
    ({"tolerance": {"bf16": {"rtol": "1e-2", "reason": "r"}}}, "is not a number"),
    ({"small_value": {"fp32": [1e-6]}}, "is not a number"),
])
def test_a_policy_value_that_is_not_a_number_is_refused(data, says):
    with pytest.raises(PolicyError, match=says):
        Policy.from_mapping(data, "p.toml")


def test_a_policy_path_that_is_a_directory_says_so(tmp_path):
    with pytest.raises(PolicyError, match="is a directory"):
        Policy.load(tmp_path)
