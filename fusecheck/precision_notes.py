"""Run-level facts about eager's precision that a reader needs next to the verdict.

On CUDA, fp32 matmuls and convolutions may run in TF32 (10 mantissa bits): eager's error against the fp64
golden is then ~1e-3, not ~1e-7, and "not worse than eager" is judged against that. The report says so.
"""
from __future__ import annotations

import torch


def eager_precision_notes(device: str, dtype: torch.dtype | None) -> list[str]:
    """Notes for a run on `device` in `dtype` (None: the model's own dtypes, fp32 included)."""
    if not str(device).startswith("cuda") or dtype not in (None, torch.float32):
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
