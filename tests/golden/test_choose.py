"""--golden auto chooses by memory (fusecheck/golden/choose.py): the whole fp64 copy when eager's footprint
at the golden's itemsize is at most 1 GiB and fits twice over in what the device has free, the streamed
golden when it does not, and the report says which and why. Both goldens give the same rows: tests/golden/test_streamed_family.py."""
import pytest
import torch

from fusecheck.check import run_check
from fusecheck.golden import choose as chooser
from fusecheck.golden.choose import HEADROOM, WHOLE_MAX_BYTES, choose, whole_copy_bytes

GIB, MIB = 2 ** 30, 2 ** 20
EAGER = {"host_start_rss_bytes": 3 * GIB, "host_peak_rss_bytes": 4 * GIB}  # eager grew by 1 GiB


@pytest.mark.parametrize("run_dtype, scale", [(torch.bfloat16, 4), (torch.float16, 4), (torch.float32, 2),
                                              (torch.float64, 1)])
def test_the_whole_copy_is_eager_s_model_and_growth_at_the_golden_s_itemsize(run_dtype, scale):
    assert whole_copy_bytes(GIB, GIB, run_dtype, torch.float64) == 2 * GIB * scale
    assert whole_copy_bytes(GIB, GIB, run_dtype, torch.float32) == 2 * GIB * max(1, scale // 2)


def test_whole_when_it_is_small_and_fits_with_headroom_streamed_when_not():
    eager = {"host_start_rss_bytes": 3 * GIB, "host_peak_rss_bytes": 3 * GIB + 64 * MIB}  # grew by 64 MiB
    need = whole_copy_bytes(64 * MIB, 64 * MIB, torch.bfloat16, torch.float64)  # 512 MiB
    for device in (torch.device("cpu"), torch.device("cuda")):
        fits = choose(64 * MIB, eager, torch.bfloat16, torch.float64, device, free=int(need * HEADROOM))
        assert fits.mode == "whole" and "0.50 GiB for the fp64 copy" in fits.why and "--golden streamed" in fits.why
        tight = choose(64 * MIB, eager, torch.bfloat16, torch.float64, device, free=int(need * HEADROOM) - 1)
        assert tight.mode == "streamed" and "not 2x over" in tight.why and "--golden whole" in tight.why


def test_a_copy_over_the_cap_streams_however_much_is_free():
    need = whole_copy_bytes(GIB, GIB, torch.bfloat16, torch.float64)  # 8 GiB, on a device with a PiB free
    big = choose(GIB, EAGER, torch.bfloat16, torch.float64, torch.device("cuda"), free=2 ** 50)
    assert need > WHOLE_MAX_BYTES and big.mode == "streamed" and "8.00 GiB" in big.why
    assert "largest memory" in big.why and "--golden whole" in big.why
    cap = WHOLE_MAX_BYTES // 8  # bf16 -> fp64: 4x model and growth
    assert choose(cap, {"host_start_rss_bytes": 0, "host_peak_rss_bytes": cap}, torch.bfloat16, torch.float64,
                  torch.device("cpu"), free=2 ** 50).mode == "whole"  # at the cap: the copy


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


def test_with_train_eager_grew_by_its_gradients_at_least():
    # the host's RSS hides growth that reuses pages freed before the phase: 32 MiB of gradients kept, 0 measured
    flat = {"host_start_rss_bytes": 3 * GIB, "host_peak_rss_bytes": 3 * GIB}
    cpu, free = torch.device("cpu"), 3 * 128 * MIB * HEADROOM // 2  # 1.5x the parameters' copy, 2x over
    assert choose(32 * MIB, flat, torch.bfloat16, torch.float64, cpu, free=free).mode == "whole"
    trained = choose(32 * MIB, flat, torch.bfloat16, torch.float64, cpu, free=free, grad_bytes=32 * MIB)
    assert trained.mode == "streamed" and "about 0.25 GiB" in trained.why
    # a measured growth above the gradients is kept as measured
    assert "about 0.38 GiB" in choose(32 * MIB, {**flat, "host_peak_rss_bytes": 3 * GIB + 64 * MIB}, torch.bfloat16,
                                      torch.float64, cpu, free=free, grad_bytes=32 * MIB).why
