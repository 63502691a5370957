"""Thresholds that follow the magnitude of the tensor being judged.

atol (and msprobe's small-value threshold) exist for elements near zero in a tensor whose values reach 1.
On a tensor whose values all stay below 1 (a bf16 gradient around 1e-4) they would pass anything, so below
unit scale both shrink with the tensor's largest magnitude: no verdict then changes when every tensor is
multiplied by a power of two; a tensor eager and the golden both hold at exactly 0 admits no error. From 1
up they are the policy's. This only ever tightens.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from fusecheck.compare.cores import finite_abs_max
from fusecheck.compare.metrics import multi_pair_metrics, multi_pair_metrics_at_scale, octave_base
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
    return _at(policy, dtype, finite_abs_max([t for t in (reference, golden) if t is not None], chunk_elems))


def _at(policy: Policy, dtype: torch.dtype, abs_max: float) -> Applied:
    """The thresholds at scale `abs_max` (kernels.thresholds does the same arithmetic on the device)."""
    base = policy.tolerance(dtype)
    tol = base.at_scale(abs_max)
    shrink = tol.atol / base.atol if base.atol else 1.0
    return Applied(tol, policy.small_value_threshold(dtype) * shrink, abs_max)


def metrics_at_scale(policy: Policy, dtype: torch.dtype, pairs: dict, reference: torch.Tensor,
                     golden: torch.Tensor | None, chunk_elems: int | None = None) -> tuple[dict, Applied]:
    """(metrics of `pairs`, the thresholds they were taken under) at the scale of eager and the golden.

    Where a core can derive the thresholds on the device (the Triton core on CUDA), the scale pass and the
    walk go out back to back and one transfer brings both back: the wait between them was a fixed cost of
    every call (docs/benchmarks.md, issue 22). The thresholds the device used are checked against this
    host's own derivation from the scale it reports; any difference, and every other case, takes the scale
    first and walks under the host's thresholds."""
    base = policy.tolerance(dtype)
    scale_of = [t for t in (reference, golden) if t is not None]
    if not base.exact and chunk_elems is None:
        got = multi_pair_metrics_at_scale(pairs, scale_of, ulp_dtype=dtype, rtol=base.rtol, atol=base.atol,
                                          small_threshold=policy.small_value_threshold(dtype))
        if got is not None:
            metrics, abs_max, derived = got
            applied = _at(policy, dtype, abs_max)
            want = [applied.tolerance.atol, applied.small_threshold, applied.tolerance.atol,
                    float(octave_base(applied.small_threshold))]
            if derived == want:
                return metrics, applied
            _disagreed(derived, want)
    applied = applied_thresholds(policy, dtype, reference, golden, chunk_elems)
    tol = applied.tolerance
    kwargs = {"chunk_elems": chunk_elems} if chunk_elems else {}
    return multi_pair_metrics(pairs, ulp_dtype=dtype, rtol=tol.rtol, atol=tol.atol,
                              small_threshold=applied.small_threshold, **kwargs), applied


def _disagreed(derived: list[float], want: list[float]) -> None:
    warnings.warn(f"fusecheck: the thresholds derived on the device {derived} differ from the host's {want}; "
                  "this comparison takes the scale first (the result is unaffected)")
