"""Thresholds that follow the magnitude of the tensor being judged.

atol (and msprobe's small-value threshold) exist for elements near zero in a tensor whose values reach 1.
On a tensor whose values all stay below 1 (a bf16 gradient around 1e-4) they would pass anything, so below
unit scale both shrink with the tensor's largest magnitude: no verdict then changes when every tensor is
multiplied by a power of two; a tensor eager and the golden both hold at exactly 0 admits no error. From 1
up they are the policy's. This only ever tightens.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from fusecheck.compare import compiled, triton_core
from fusecheck.compare.fused import eager_chunk_elems
from fusecheck.compare.metrics import iter_aligned_chunks
from fusecheck.policy import Policy, Tolerance


def _chunk_abs_max(raws: list[torch.Tensor]) -> torch.Tensor:
    """Largest finite |x| of each raw chunk, in its own dtype (exact: a maximum rounds nothing)."""
    return torch.stack([torch.where(torch.isfinite(r), r.abs(), 0).amax().to(torch.float64) for r in raws])


def _cpu_abs_max(tensors: list[torch.Tensor]) -> float | None:
    from fusecheck.compare import cpu_core
    return cpu_core.finite_abs_max(tensors)


# device type -> a hand-written finite_abs_max, or None where it does not apply (as fused.FAST_CORES)
FAST_ABS_MAX: dict[str, Callable] = {"cpu": _cpu_abs_max, "cuda": triton_core.finite_abs_max}


def finite_abs_max(tensors: list[torch.Tensor], chunk_elems: int | None = None) -> float:
    """Largest |x| over the finite elements of same-shape floating tensors, in one walk over their chunks
    (compiled with the comparison core where that is enabled; 0.0 when there is none)."""
    device = tensors[0].device
    if chunk_elems is None and device.type in FAST_ABS_MAX:
        quick = FAST_ABS_MAX[device.type](tensors)
        if quick is not None:
            return quick
    fast = (chunk_elems is None and compiled.enabled(device) and tensors[0].numel() >= compiled.chunk_elems(device)
            and not torch.compiler.is_compiling())
    size = compiled.chunk_elems(device) if fast else (chunk_elems or eager_chunk_elems(device))
    best = None
    with torch.no_grad():
        for chunk in iter_aligned_chunks(tensors, size):
            raws = [c.to(device) for c in chunk]
            if not raws[0].numel():
                continue
            out, n = None, raws[0].numel()
            if fast and n <= size:  # zero padding adds nothing to a maximum of |x|
                out = compiled.call(_chunk_abs_max, raws if n == size else compiled.padded(raws, size))
            if out is None:
                out = _chunk_abs_max(raws)
            best = out if best is None else torch.maximum(best, out)
    return 0.0 if best is None else float(best.max())


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
