"""Thresholds that follow the magnitude of the tensor being judged.

atol (and msprobe's small-value threshold) exist for elements near zero in a tensor whose values reach 1.
On a tensor whose values all stay below 1 (a bf16 gradient around 1e-4) they would pass anything, so below
unit scale both shrink with the tensor's largest magnitude: no verdict then changes when every tensor is
multiplied by a power of two; a tensor eager and the golden both hold at exactly 0 admits no error. From 1
up they are the policy's. This only ever tightens.
"""
from __future__ import annotations

from dataclasses import dataclass
import torch

from fusecheck.compare.cores import finite_abs_max
from fusecheck.policy import Policy, Tolerance


@dataclass(frozen=True)
class Applied:
    """What a comparison actually used: the policy's tolerance and small-value threshold at this scale."""

    tolerance: Tolerance
    small_threshold: float
    abs_max: float  # largest finite |eager|, |golden|

    @property
    def atol_scaled(self) -> bool:
        return self.abs_max < 1 and not self.tolerance.exact


def applied_thresholds(policy: Policy, dtype: torch.dtype, reference: torch.Tensor, golden: torch.Tensor | None,
                       chunk_elems: int | None = None) -> Applied:
    base = policy.tolerance(dtype)
    if base.exact:
        return Applied(base, 0.0, 0.0)
    abs_max = finite_abs_max([t for t in (reference, golden) if t is not None], chunk_elems)
    tol = base.at_scale(abs_max)
    shrink = tol.atol / base.atol if base.atol else 1.0
    return Applied(tol, policy.small_value_threshold(dtype) * shrink, abs_max)
