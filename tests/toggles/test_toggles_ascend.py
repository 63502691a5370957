"""Ascend adapter: flag construction and selection only (no NPU here)."""
import pytest

from fusecheck.toggles import ToggleError, ToggleUnsupported
from fusecheck.toggles.ascend import ascend_flags, ascend_toggled, npu_available


def test_reduction_toggle_disables_the_reduce_pass():
    f = ascend_flags(["fusion.reduction"])
    assert f.autofuse_flags == "--enable_autofuse=true;--autofuse_disable_pass=reduce"


def test_several_toggles_join_values_with_commas_and_items_with_semicolons():
    f = ascend_flags(["fusion.reduction", "fusion.gather", "emulate_precision_casts"], enable=["concat"])
    assert f.autofuse_flags == ("--enable_autofuse=true;--autofuse_enable_pass=concat;"
                                "--autofuse_disable_pass=reduce,gather;--autofuse_enhance_precision_blacklist=all")
    assert f.environment()["TORCHINDUCTOR_EMULATE_PRECISION_CASTS"] == "1"


def test_toggles_without_an_ascend_switch_are_reported_not_dropped():
    f = ascend_flags(["fusion.pointwise", "fusion.template"])
    assert set(f.unmapped) == {"fusion.pointwise", "fusion.template"}
    assert "elemwise" in f.unmapped["fusion.pointwise"]
    assert f.autofuse_flags == "--enable_autofuse=true"


def test_a_pass_cannot_be_enabled_and_disabled():
    with pytest.raises(ToggleError, match="both enabled and disabled"):
        ascend_flags(["fusion.reduction"], enable=["reduce"])


def test_unknown_names_are_errors():
    with pytest.raises(ToggleError, match="unknown toggle"):
        ascend_flags(["fusion.nothing"])
    with pytest.raises(ToggleError, match="unknown autofuse pass"):
        ascend_flags([], enable=["elemwise"])


@pytest.mark.skipif(npu_available(), reason="torch_npu is importable here")
def test_applying_without_torch_npu_is_a_clear_error():
    with pytest.raises(ToggleUnsupported, match="torch_npu"):
        with ascend_toggled(["fusion.reduction"]):
            pass


# -- torch_npu's Inductor switches: SHUT_DOWN_FX_PASS_LIST and force_fallback_kernel_id ----------------
def test_pattern_passes_shuts_down_every_torch_npu_fx_pass():
    f = ascend_flags(["pattern_passes"])
    assert f.environment()["SHUT_DOWN_FX_PASS_LIST"] == "all" and "pattern_passes" not in f.unmapped


def test_named_fx_passes_are_joined_with_commas_once_each():
    f = ascend_flags(["fusion.reduction"], fx_passes_off="fold_where, cat_slice_cat_fold_pass,fold_where")
    assert f.environment()["SHUT_DOWN_FX_PASS_LIST"] == "fold_where,cat_slice_cat_fold_pass"
    assert "SHUT_DOWN_FX_PASS_LIST" not in ascend_flags(["fusion.reduction"]).environment()
    assert ascend_flags(["pattern_passes"], fx_passes_off=["fold_where"]).fx_passes_off == ["all"]


@pytest.mark.parametrize("bad, match", [("all,fold_where", "'all' already"), ("fold-where", "not a pass name"),
                                        ("a b", "not a pass name")])
def test_bad_fx_pass_lists_are_refused(bad, match):
    with pytest.raises(ToggleError, match=match):
        ascend_flags([], fx_passes_off=bad)


@pytest.mark.parametrize("spec, value", [(None, None), ("all", "all"), ("10,2, 1", [1, 2, 10]), ([3, 3], [3])])
def test_fallback_kernel_ids(spec, value):
    f = ascend_flags([], fallback=spec)
    assert f.fallback_kernels == value
    assert f.config() == ({} if value is None else {"force_fallback_kernel_id": value})


@pytest.mark.parametrize("bad", ["x", "-1", "", []])
def test_bad_fallback_kernel_ids_are_refused(bad):
    with pytest.raises(ToggleError, match="force_fallback_kernel_id"):
        ascend_flags([], fallback=bad)


def test_data_movement_passes_promise_bitwise_equality():
    from fusecheck.toggles.promises import BITWISE_EAGER
    assert ascend_flags([], enable=["concat", "transpose"]).promises == (BITWISE_EAGER,)
    assert ascend_flags([], enable=["reduce"]).promises == ()


def test_the_fx_pass_list_after_torch_npu_inductor_was_imported_is_refused(monkeypatch):
    import sys
    import types
    monkeypatch.setitem(sys.modules, "torch_npu._inductor", types.ModuleType("torch_npu._inductor"))
    with pytest.raises(ToggleError, match="before the process starts"):
        with ascend_toggled(["pattern_passes"]):
            pass
