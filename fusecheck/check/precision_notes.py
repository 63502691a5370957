"""Run-level facts about eager's precision that a reader needs next to the verdict, and TF32 pinned off.

On CUDA, fp32 matmuls and convolutions may run in TF32 (10 mantissa bits) when torch's flags allow it, and
whether a kernel does depends on more than the flags: measured on the H200, cuDNN runs ViT's and ResNet's fp32
convolutions in full fp32 in eager's NCHW layout but in TF32 in the channels-last layout Inductor picks, so
compiled was 400-600x eager's error at every seed, for a reason that is not fusion (eager in channels-last
has compiled's error to the bit). So a check pins TF32 off for eager and compiled alike by default
(`pinned_fp32`), and says so; `--tf32` keeps the process's flags, and the report then says eager's error
against the fp64 golden may be ~1e-3, not ~1e-7.
"""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def pinned_fp32(device: str, keep: bool):
    """TF32 off for matmuls and cuDNN (process-global flags, restored after) unless `keep` or not CUDA."""
    if keep or not str(device).startswith("cuda"):
        yield
        return
    saved = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cuda.matmul.allow_tf32 = saved[1]
        torch.backends.cudnn.allow_tf32 = saved[2]


def _fp32_on_cuda(device: str, dtype: torch.dtype | None) -> bool:
    """A run where TF32 can matter: on CUDA, in fp32 (None: the model's own dtypes, fp32 included)."""
    return str(device).startswith("cuda") and dtype in (None, torch.float32)


def pinned_note(device: str, dtype: torch.dtype | None, keep: bool) -> list[str]:
    if keep or not _fp32_on_cuda(device, dtype):
        return []
    return ["TF32 was off for eager and compiled (fp32 matmuls and cuDNN convolutions in full fp32): with it on, "
            "cuDNN uses TF32 in some layouts and not others, so eager's and compiled's errors would not be "
            "comparable; --tf32 keeps this process's TF32 settings"]


def eager_precision_notes(device: str, dtype: torch.dtype | None) -> list[str]:
    """Notes for a run on `device` in `dtype` (None: the model's own dtypes, fp32 included)."""
    if not _fp32_on_cuda(device, dtype):
        return []
    used = []
    if torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest":
        used.append(f"matmul (float32_matmul_precision={torch.get_float32_matmul_precision()!r})")
    if torch.backends.cudnn.allow_tf32:
        used.append("cuDNN convolutions (torch.backends.cudnn.allow_tf32)")
    if not used:
        return []
    return [f"eager fp32 may run in TF32 on this device: {', '.join(used)}; eager's error against the fp64 "
            "golden is then ~1e-3, not ~1e-7, and compiled is judged against that"]
