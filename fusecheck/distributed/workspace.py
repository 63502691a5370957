"""Persistent kernel workspaces that the tool poisons with fresh random data before every run.

A kernel that reads a buffer slot before its data arrived (missing wait, buffer reused too early) then
returns garbage that differs from run to run instead of a stale but plausible value from the last run.
"""
from __future__ import annotations

import torch

from fusecheck.distributed.ranges import poison_range

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


def clear() -> None:
    _BUFFERS.clear()
