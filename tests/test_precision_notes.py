"""The TF32 note: said on CUDA fp32 runs when eager may use TF32, silent otherwise."""
import pytest
import torch

from fusecheck.precision_notes import eager_precision_notes


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
