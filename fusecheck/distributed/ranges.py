"""Value ranges per floating dtype that layer-1 tags and workspace poison share: the largest integer a dtype
holds exactly (small-integer tags) and where poison values lie (never a valid tag). One module, imported by
both `tags` and `workspace`, so neither imports the other."""
from __future__ import annotations

import torch

EXACT_INT_LIMIT = {torch.float16: 2**11, torch.bfloat16: 2**8, torch.float32: 2**24, torch.float64: 2**53}


def poison_range(dtype: torch.dtype) -> tuple[float, float]:
    """Where poison values lie for a floating dtype: finite in that dtype (fp16's 65504 would turn the old 1e6
    into Inf), far from any real output, and never a valid position tag: non-integers (fp32/fp64), or, where
    the dtype rounds large values to integers (fp16, bf16), above the largest tag it can hold exactly."""
    hi = min(1e6, torch.finfo(dtype).max / 4)
    limit = EXACT_INT_LIMIT.get(dtype)
    lo = 2.0 * limit if limit is not None and 4.0 * limit <= hi else 0.37
    return lo, hi
