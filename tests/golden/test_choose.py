"""--golden auto chooses by memory (fusecheck/golden/choose.py): the whole fp64 copy when eager's footprint at
the golden's itemsize fits twice over in what the device has free, the streamed golden when it does not, and
the report says which and why. Both goldens give the same rows: tests/golden/test_streamed_family.py."""
import pytest
import torch

from fusecheck.check import run_check
from fusecheck.golden import choose as chooser
from fusecheck.golden.choose import HEADROOM, choose, whole_copy_bytes

GIB = 2 ** 30
EAGER = {"host_start_rss_bytes": 3 * GIB, "host_peak_rss_bytes": 4 * GIB}  # eager grew by 1 GiB


@pytest.mark.parametrize("run_dtype, scale", [(torch.bfloat16, 4), (torch.float16, 4), (torch.float32, 2),
                                              (torch.float64, 1)])
def test_the_whole_copy_is_eager_s_model_and_growth_at_the_golden_s_itemsize(run_dtype, scale):
    assert whole_copy_bytes(GIB, GIB, run_dtype, torch.float64) == 2 * GIB * scale
    assert whole_copy_bytes(GIB, GIB, run_dtype, torch.float32) == 2 * GIB * max(1, scale // 2)


def test_whole_when_it_fits_with_headroom_streamed_when_not():
    need = whole_copy_bytes(GIB, GIB, torch.bfloat16, torch.float64)  # 8 GiB
    fits = choose(GIB, EAGER, torch.bfloat16, torch.float64, torch.device("cpu"), free=int(need * HEADROOM))
    assert fits.mode == "whole" and "8.00 GiB for the fp64 copy" in fits.why and "--golden streamed" in fits.why
    tight = choose(GIB, EAGER, torch.bfloat16, torch.float64, torch.device("cpu"), free=int(need * HEADROOM) - 1)
    assert tight.mode == "streamed" and "not 2x over" in tight.why and "--golden whole" in tight.why


def test_unknown_free_memory_or_an_unmeasured_eager_keeps_the_streamed_golden():
    assert choose(GIB, EAGER, torch.bfloat16, torch.float64, torch.device("meta")).mode == "streamed"
    assert choose(GIB, {}, torch.bfloat16, torch.float64, torch.device("cpu"), free=10 ** 15).mode == "streamed"


def _blocks():
    from fusecheck.case import load_target
    return load_target("models/wide_blocks.py:build")


def test_a_check_says_which_golden_it_chose_and_a_full_device_streams(monkeypatch):
    roomy = run_check(_blocks(), backend="aot_eager")
    assert roomy.golden_mode == "whole" and any(n.startswith("golden: the whole fp64 copy") for n in roomy.notes)
    monkeypatch.setattr(chooser, "available_bytes", lambda device: 1024)  # a device with no room left
    full = run_check(_blocks(), backend="aot_eager")
    assert full.golden_mode.startswith("streamed") and any(n.startswith("golden: streamed") for n in full.notes)
    assert [r.name for r in full.rows] == [r.name for r in roomy.rows]
    assert all(a.verdict.status == b.verdict.status for a, b in zip(full.rows, roomy.rows))
    forced = run_check(_blocks(), backend="aot_eager", golden="streamed")
    assert forced.golden_mode.startswith("streamed") and not any(n.startswith("golden:") for n in forced.notes)
