"""Exact digests of a tensor's bits, computed on its own device.

Why: the second eager and compiled runs exist only to prove bitwise repeatability. Keeping a second copy of
every output and gradient doubles a run's memory; a digest is a few words. Any single changed element always
changes the digest (it adds d * odd mod 2^64, d != 0); several changed elements collide with probability
about 2^-64 per mixing word, and there are two words.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

_CHUNK = 1 << 22
_MIX = (0x9E3779B97F4A7C15 - (1 << 64), 0xC2B2AE3D27D4EB4F - (1 << 64))  # as signed int64
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class Digest:
    dtype: str
    shape: tuple[int, ...]
    device: str
    words: tuple[int, int]


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.contiguous().reshape(-1).view(_INT_OF_SIZE[t.element_size()])


def digest(t: torch.Tensor) -> Digest:
    """Two position-mixed int64 sums of the bit pattern (wrapping arithmetic)."""
    meta = (str(t.dtype).removeprefix("torch."), tuple(t.shape), t.device.type)
    if t.device.type == "meta":  # no data to read: the device mismatch is reported elsewhere
        return Digest(*meta, (0, 0))
    bits = _bits(t)
    acc = [torch.zeros((), dtype=torch.int64, device=bits.device) for _ in _MIX]
    for start in range(0, bits.numel(), _CHUNK):
        x = bits[start:start + _CHUNK].to(torch.int64)
        pos = torch.arange(start, start + x.numel(), dtype=torch.int64, device=x.device)
        for i, k in enumerate(_MIX):
            acc[i] += (x * ((pos * k) | 1)).sum()
            x = x ^ (pos << 17)  # the second word sees different bits, so linear collisions differ
    return Digest(*meta, (int(acc[0]), int(acc[1])))


def same_bits(t: torch.Tensor, d: Digest) -> bool:
    return digest(t) == d
