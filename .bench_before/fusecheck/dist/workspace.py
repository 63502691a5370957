"""Persistent kernel workspaces that the tool poisons with fresh random data before every run.

A kernel that reads a buffer slot before its data arrived (missing wait, buffer reused too early) then
returns garbage that differs from run to run instead of a stale but plausible value from the last run.
"""
from __future__ import annotations

import torch

_BUFFERS: dict[tuple, torch.Tensor] = {}
_GEN = torch.Generator()


def buffer(name: str, shape, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """A buffer that persists across calls (like a symmetric-memory workspace); poisoned by `poison_all`."""
    key = (name, tuple(shape), dtype, str(device))
    buf = _BUFFERS.get(key)
    if buf is None:
        buf = _BUFFERS[key] = torch.empty(tuple(shape), dtype=dtype, device=device)
        _poison(buf)
    return buf


def poison_all(seed: int) -> int:
    """Fill every workspace with random data (a different pattern per seed); returns how many were poisoned."""
    _GEN.manual_seed(seed)
    for buf in _BUFFERS.values():
        _poison(buf)
    return len(_BUFFERS)


def _poison(buf: torch.Tensor) -> None:
    if buf.is_floating_point():
        lo, hi = poison_range(buf.dtype)
        # k + 0.5 is exact (never an integer) in fp32 and fp64 below 2**23
        noise = torch.floor(torch.rand(buf.shape, generator=_GEN, dtype=torch.float64) * (hi - lo) + lo) + 0.5
        buf.copy_(noise.to(buf.device, buf.dtype))
    else:
        buf.copy_(torch.randint(-2**15, 2**15, buf.shape, generator=_GEN).to(buf.device, buf.dtype))


def poison_range(dtype: torch.dtype) -> tuple[float, float]:
    """Where poison values lie for a floating dtype: finite in that dtype (fp16's 65504 would turn the old 1e6
    into Inf), far from any real output, and never a valid position tag: non-integers (fp32/fp64), or, where
    the dtype rounds large values to integers (fp16, bf16), above the largest tag it can hold exactly."""
    from fusecheck.dist.tags import EXACT_INT_LIMIT
    hi = min(1e6, torch.finfo(dtype).max / 4)
    limit = EXACT_INT_LIMIT.get(dtype)
    lo = 2.0 * limit if limit is not None and 4.0 * limit <= hi else 0.37
    return lo, hi


def clear() -> None:
    _BUFFERS.clear()
