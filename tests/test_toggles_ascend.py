"""Ascend adapter: flag construction and selection only (no NPU here)."""
import pytest

from fusecheck.passes import ToggleError, ToggleUnsupported
from fusecheck.passes.ascend import ascend_flags, ascend_toggled, npu_available


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
