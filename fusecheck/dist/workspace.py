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
        # large, non-integer values: never a valid position tag, far from any real output
        noise = torch.rand(buf.shape, generator=_GEN, dtype=torch.float32) * 1e6 + 0.37
        buf.copy_(noise.to(buf.device, buf.dtype))
    else:
        buf.copy_(torch.randint(-2**15, 2**15, buf.shape, generator=_GEN).to(buf.device, buf.dtype))


def clear() -> None:
    _BUFFERS.clear()
