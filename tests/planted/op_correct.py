"""Correct variants of the fused linear + online softmax that `fusecheck op` must pass: other chunk counts
(a single chunk, one column at a time, a chunk that divides nothing), three passes instead of two, a split-K
linear (the contraction summed as partial products), and the running sum kept in the op dtype's fp32 twin
from logits computed on the unfused linear."""
from __future__ import annotations

import torch

from op_kernel import OnlineSoftmax, chunk_bounds, chunk_logits, normalise, online_softmax


class OneChunk(OnlineSoftmax):
    def fused(self, x, w, b):
        return online_softmax(x, w, b, max(1, w.shape[0]))


class OneColumnAtATime(OnlineSoftmax):
    def fused(self, x, w, b):
        return online_softmax(x, w, b, 1)


class ChunkOfSeven(OnlineSoftmax):
    def fused(self, x, w, b):
        return online_softmax(x, w, b, 7)


class ThreePass(OnlineSoftmax):
    """max over every chunk first, then the sum, then the normalisation (no rescaling of the sum)."""

    def fused(self, x, w, b):
        x32, w32, b32 = x.float(), w.float(), b.float()
        bounds = chunk_bounds(w.shape[0], self.chunk)
        m = torch.stack([chunk_logits(x32, w32, b32, lo, hi).amax(-1) for lo, hi in bounds]).amax(0)
        s = sum(torch.exp(chunk_logits(x32, w32, b32, lo, hi) - m[:, None]).sum(-1) for lo, hi in bounds)
        return normalise(x32, w32, b32, bounds, m, s, x.dtype)


class SplitK(OnlineSoftmax):
    """The linear's contraction split in `splits` partial products (fp32), summed, then the online softmax."""

    def __init__(self, chunk: int = 16, splits: int = 3):
        super().__init__(chunk)
        self.splits = splits

    def fused(self, x, w, b):
        k = x.shape[1]
        edges = [round(i * k / self.splits) for i in range(self.splits + 1)]
        logits = sum(x[:, lo:hi].float() @ w[:, lo:hi].float().T for lo, hi in zip(edges, edges[1:]) if hi > lo)
        logits = logits + b.float()
        eye = torch.eye(logits.shape[1])
        return online_softmax(logits, eye, torch.zeros(logits.shape[1]), self.chunk)[0].to(x.dtype), \
            torch.logsumexp(logits, -1).to(x.dtype)
