"""Which elements of a doubted row eager has a significant digit at, and the row restricted to either part.

Why: the relative checks (mean and per-octave max relative error) divide each element's error by its golden
value. Where a result is a sum with heavy cancellation (an attention key or bias gradient, whose exact part
softmax's shift invariance cancels; a gradient through a normalisation), many elements' golden values are
far below the noise of the terms that cancelled: eager's own error there is larger than the value itself.
Those elements carry no relative information -- eager's error / |golden| and compiled's are noise over
noise, as large as the cancellation is deep -- yet one of them decides a mean of ratios. The tensor-level
rule (family.py: no significant digit anywhere, judge on RMSE alone) is the same criterion applied to the
whole tensor; this applies it per element (Monte Carlo arithmetic's: an element's significant digits are
-log10(noise / |value|), none when its noise reaches its value). An element's noise is the larger of
eager's error and the largest move of K randomised-rounding eager runs there.
"""
from __future__ import annotations

import torch

from fusecheck.check.rows import Doubt
from fusecheck.compare.noise_band import Spread


def digit_mask(doubt: Doubt, spread: torch.Tensor | None) -> torch.Tensor | None:
    """Per element, True where eager has a significant digit (its noise below |golden|); non-finite
    elements count as having one (their checks are structural). None when every element has one, or none
    has (then the tensor-level rule applies)."""
    g = doubt.golden.double()
    e = doubt.eager.to(g.device).double()
    noise = (e - g).abs()
    if spread is not None and spread.shape == g.shape:
        noise = torch.maximum(noise, spread.to(g.device).double())
    without = torch.isfinite(g) & torch.isfinite(noise) & (noise > g.abs())
    if not bool(without.any()) or bool(without.all()):
        return None
    return ~without


def restrict(doubt: Doubt, spread: Spread, name: str, mask: torch.Tensor) -> tuple[Doubt, Spread]:
    """The doubt and the spread of `name` on the elements `mask` selects, flattened."""
    flat = mask.reshape(-1)

    def sub(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(-1)[flat.to(t.device)]

    part = Doubt([(call, sub(r), v) for call, r, v in doubt.runs], sub(doubt.eager), sub(doubt.golden))
    s = Spread(runs=spread.runs, how=spread.how)
    if name in spread and spread[name] is not None and spread[name].shape == mask.shape:
        s[name] = sub(spread[name])
    s.diffs[name] = [sub(d) for d in spread.diffs.get(name, []) if d.shape == mask.shape]
    cal = spread.calibration(name)
    if cal is not None and all(c.shape == mask.shape for c in cal):
        s.first[name], s.rest[name] = (sub(c) for c in cal)
    return part, s
