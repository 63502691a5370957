"""The TF32 note: said on CUDA fp32 runs when eager may use TF32, silent otherwise."""
import pytest
import torch

from fusecheck.check.precision_notes import eager_precision_notes


@pytest.fixture
def flags():
    """Set torch's TF32 flags for one test and restore them after (they are process-global)."""
    saved = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32)

    def set_flags(matmul_precision: str, cudnn: bool):
        torch.set_float32_matmul_precision(matmul_precision)
        torch.backends.cudnn.allow_tf32 = cudnn
    yield set_flags
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cuda.matmul.allow_tf32 = saved[1]
    torch.backends.cudnn.allow_tf32 = saved[2]


def test_tf32_matmul_or_conv_is_said_on_cuda_fp32(flags):
    flags("highest", cudnn=True)
    (note,) = eager_precision_notes("cuda", torch.float32)
    assert "TF32" in note and "cuDNN" in note and "matmul" not in note
    flags("high", cudnn=False)
    assert "matmul" in eager_precision_notes("cuda:0", None)[0]


def test_no_note_without_tf32_or_off_cuda_or_in_bf16(flags):
    flags("highest", cudnn=False)
    assert eager_precision_notes("cuda", torch.float32) == []
    flags("high", cudnn=True)
    assert eager_precision_notes("cpu", torch.float32) == []
    assert eager_precision_notes("cuda", torch.bfloat16) == []


def test_tf32_is_pinned_off_on_cuda_and_restored(flags):
    """eager and compiled run fp32 without TF32 on CUDA (cuDNN picks TF32 in channels-last and not in NCHW:
    compiled was 400-600x eager's error on the H200 for that reason alone); the flags come back after."""
    from fusecheck.check.precision_notes import pinned_fp32, pinned_note
    flags("high", cudnn=True)
    with pinned_fp32("cuda", keep=False):
        assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cudnn.allow_tf32
        assert eager_precision_notes("cuda", torch.float32) == []  # nothing to warn about while pinned
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32
    with pinned_fp32("cuda", keep=True):
        assert torch.backends.cudnn.allow_tf32
    with pinned_fp32("cpu", keep=False):
        assert torch.backends.cudnn.allow_tf32
    assert "TF32 was off" in pinned_note("cuda", torch.float32, keep=False)[0]
    assert pinned_note("cuda", torch.float32, keep=True) == pinned_note("cuda", torch.bfloat16, keep=False) == []


def test_sharded_check_pins_tf32_like_run_check(flags, monkeypatch):
    """`fusecheck check --nproc` builds its own pipeline (sharded/check.py): it must run under the same pin,
    and say so, as every single-process check does (the TF32 warning itself is the shared judge stage's)."""
    from fusecheck.check import CheckOptions
    from fusecheck.sharded import check

    seen = []

    def fake_check_rank(case, opts, device, progress):
        seen.append((torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32))
        return {"notes": []}, []
    monkeypatch.setattr(check, "_check_rank", fake_check_rank)
    flags("high", cudnn=True)
    opts = CheckOptions(dtype=torch.float32, device="cuda")
    result, _ = check.check_rank(None, opts, torch.device("cuda", 0), print)
    assert seen == [("highest", False)] and "TF32 was off" in result["notes"][0]
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32  # restored
    result, _ = check.check_rank(None, opts.replace(tf32=True), torch.device("cuda", 0), print)
    assert seen[1] == ("high", True) and result["notes"] == []
