"""Planted: bugs only a probe or the backward pass sees. Each computes the finite forward exactly as the correct
kernel does, so the ordinary rows pass and only the named probe (or gradient) fails."""
from __future__ import annotations

import torch

from op_kernel import OnlineSoftmax, online_softmax


class NonFiniteDropped(OnlineSoftmax):
    """NaN/Inf in x is read as 0 (a load masked with `isfinite`, `other=0`): the NaN/Inf probe of x fails."""

    def fused(self, x, w, b):
        return online_softmax(torch.where(torch.isfinite(x), x, torch.zeros_like(x)), w, b, self.chunk)


class NoMaxSubtraction(OnlineSoftmax):
    """exp(logits) / sum(exp(logits)) without the running max: exact at ordinary magnitudes (up to rounding),
    overflow at huge ones; only the magnitude probes fail."""

    def fused(self, x, w, b):
        logits = x.float() @ w.float().T + b.float()
        e = torch.exp(logits)
        s = e.sum(-1)
        return (e / s[:, None]).to(x.dtype), torch.log(s).to(x.dtype)


class BiasGradScaled(OnlineSoftmax):
    """The forward is the correct kernel's; the backward scales the bias gradient by 1.5 (a custom backward that
    counts the bias twice in one of two tiles): only grad.b fails under --train."""

    def fused(self, x, w, b):
        return online_softmax(x, w, b + 0.5 * (b - b.detach()), self.chunk)
