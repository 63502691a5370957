"""How |error| against the golden is spread over a tensor: quantiles and a log-scale histogram.

The verdict's metrics are summaries (rmse, max); the HTML report draws the whole spread of eager's and
compiled's errors so that a reader sees whether compiled is worse everywhere or in a few elements. The
histogram's bins are fixed (powers of ten from 1e-16 to 1e4, in half decades) so that eager's and
compiled's histograms, and two runs, share their bins. Quantiles come from a strided sample of at most
`sample` elements (exact below it), computed on the tensors' own device.
"""
from __future__ import annotations

from typing import Any

import torch

QUANTILES = (0.5, 0.9, 0.99, 0.999, 1.0)
LOG10_LO, LOG10_HI, LOG10_STEP = -16.0, 4.0, 0.5
CHUNK = 1 << 22


def error_distribution(actual: torch.Tensor, golden: torch.Tensor, sample: int = 1 << 20) -> dict[str, Any] | None:
    """Quantiles and histogram of |actual - golden| over the positions where both are finite, or None when
    the pair cannot be compared element-wise (shapes differ, not floating)."""
    if not isinstance(actual, torch.Tensor) or not isinstance(golden, torch.Tensor) or actual.shape != golden.shape:
        return None
    if not (actual.is_floating_point() or actual.is_complex()):
        return None
    a, g = actual.detach().reshape(-1), golden.detach().to(actual.device).reshape(-1)
    wide = torch.complex128 if (a.is_complex() or g.is_complex()) else torch.float64
    if a.device.type == "mps":  # no fp64 there
        wide = torch.complex64 if wide is torch.complex128 else torch.float32
    n_bins = int(round((LOG10_HI - LOG10_LO) / LOG10_STEP))
    counts = torch.zeros(n_bins + 2, dtype=torch.float64)  # [below 1e-16 (zeros too), bins..., above 1e4]
    n = nonfinite = zeros = 0
    step = max(1, a.numel() // sample)
    picked = []
    for start in range(0, a.numel(), CHUNK):
        err = (a[start:start + CHUNK].to(wide) - g[start:start + CHUNK].to(wide)).abs()
        finite = torch.isfinite(err)
        nonfinite += int((~finite).sum())
        err = err[finite].to(torch.float64)
        n += err.numel()
        zeros += int((err == 0).sum())
        idx = torch.floor((torch.log10(err.clamp_min(1e-300)) - LOG10_LO) / LOG10_STEP).long() + 1
        counts += torch.bincount(idx.clamp(0, n_bins + 1).cpu(), minlength=n_bins + 2).double()
        offset = (-start) % step
        picked.append(err[offset::step].cpu() if step > 1 else err.cpu())
    values = torch.cat(picked) if picked else torch.zeros(0, dtype=torch.float64)
    quantiles = {}
    if values.numel():
        values, _ = torch.sort(values)
        for q in QUANTILES:
            quantiles[f"{q:g}"] = float(values[min(values.numel() - 1, int(q * (values.numel() - 1) + 0.5))])
    return {"n": n, "nonfinite": nonfinite, "zeros": zeros, "sampled": step > 1,
            "log10_bins": [LOG10_LO, LOG10_HI, LOG10_STEP], "counts": [int(c) for c in counts.tolist()],
            "quantiles": quantiles}


def distributions(eager: torch.Tensor, compiled: torch.Tensor, golden: torch.Tensor) -> dict[str, Any] | None:
    """Eager's and compiled's error spread against the golden, as the HTML report reads it (row "distribution")."""
    e, c = error_distribution(eager, golden), error_distribution(compiled, golden)
    return None if e is None or c is None else {"eager": e, "compiled": c}
