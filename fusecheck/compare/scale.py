"""Thresholds that follow the magnitude of the tensor being judged.

atol (and msprobe's small-value threshold) exist for elements near zero in a tensor whose values reach 1.
On a tensor whose values all stay below 1 (a bf16 gradient around 1e-4) they would pass anything, so below
unit scale both shrink with the tensor's largest magnitude: no verdict then changes when every tensor is
multiplied by a power of two. From 1 up they are the policy's. This only ever tightens.

The same pre-pass reads eager's RMSE against the golden: the noise every element of this tensor carries,
below which a golden value's relative error measures a cancellation rather than a kernel (the verdict's
MaxRel floors its denominators there).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fusecheck.compare.metrics import DEFAULT_CHUNK_ELEMS, accum_dtype, iter_aligned_chunks
from fusecheck.policy import Policy, Tolerance


def prepass(reference: torch.Tensor, golden: torch.Tensor | None,
            chunk_elems: int = DEFAULT_CHUNK_ELEMS) -> tuple[float, float]:
    """One chunked read of eager and golden: the largest finite |x| of either, and eager's RMSE against the
    golden over positions finite in both (0.0 without a golden)."""
    abs_max, sq, n = 0.0, 0.0, 0
    tensors = [reference] if golden is None else [reference, golden]
    with torch.no_grad():
        for chunk in iter_aligned_chunks(tensors, chunk_elems):
            if not chunk[0].numel():
                continue
            up = [c.to(accum_dtype(c.device)) for c in chunk]
            finite = [torch.isfinite(u) for u in up]
            for u, f in zip(up, finite):
                abs_max = max(abs_max, float(torch.where(f, u, 0).abs().max()))
            if golden is not None:
                both = finite[0] & finite[1]
                d = torch.where(both, up[0] - up[1], 0)
                sq, n = sq + float(torch.dot(d, d)), n + int(both.sum())
    return abs_max, math.sqrt(sq / n) if n else 0.0


@dataclass(frozen=True)
class Applied:
    """What a comparison actually used: the policy's tolerance and small-value threshold at this scale, and
    eager's typical absolute error (the noise floor of the guarded MaxRel)."""

    tolerance: Tolerance
    small_threshold: float
    abs_max: float  # largest finite |eager|, |golden|
    noise: float = 0.0  # RMSE of eager against the golden

    @property
    def atol_scaled(self) -> bool:
        return 0 < self.abs_max < 1 and not self.tolerance.exact


def applied_thresholds(policy: Policy, dtype: torch.dtype, reference: torch.Tensor, golden: torch.Tensor | None,
                       chunk_elems: int = DEFAULT_CHUNK_ELEMS) -> Applied:
    base = policy.tolerance(dtype)
    if base.exact:
        return Applied(base, 0.0, 0.0)
    abs_max, noise = prepass(reference, golden, chunk_elems)
    tol = base.at_scale(abs_max)
    shrink = tol.atol / base.atol if base.atol else 1.0
    return Applied(tol, policy.small_value_threshold(dtype) * shrink, abs_max, noise)
