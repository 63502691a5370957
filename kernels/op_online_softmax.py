"""A fused linear + online softmax (the reference kernel of `fusecheck op`), written in torch so it runs on CPU.

    logits = x @ w.T + b            x (m, k), w (n, k), b (n,)
    out    = softmax(logits, -1), logsumexp(logits, -1)

The fused kernel never holds the (m, n) logits in the op dtype: it walks the n columns in chunks of `chunk`,
computing each chunk's logits in fp32 and keeping a running max and a running sum of exponentials (the
online softmax: s <- s * exp(m_old - m_new) + sum(exp(logits - m_new))), then a second pass recomputes each
chunk's logits and writes exp(logits - m) / s. The shapes include n that do not divide the chunk (a tail).

    fusecheck op kernels/op_online_softmax.py:OnlineSoftmax --dtype fp32,bf16,fp16 [--spec-arg chunk=8]
"""
from __future__ import annotations

import torch

from fusecheck.op import OpSpec, seeded_randn

NEG_INF = float("-inf")


def chunk_bounds(n: int, chunk: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + chunk, n)) for lo in range(0, n, chunk)]


def chunk_logits(x32: torch.Tensor, w32: torch.Tensor, b32: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    return x32 @ w32[lo:hi].T + b32[lo:hi]


def running_update(m: torch.Tensor, s: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One online-softmax step: the new max and the sum rescaled to it (guarded where the max is still -inf
    or did not move, so an all -inf chunk does not turn the row into NaN where softmax is finite)."""
    m_new = torch.maximum(m, logits.amax(-1))
    base = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
    alpha = torch.where(m == m_new, torch.ones_like(m), torch.exp(m - base))
    return m_new, s * alpha + torch.exp(logits - base[:, None]).sum(-1)


def normalise(x32, w32, b32, bounds, m, s, dtype):
    base = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    probs = torch.cat([torch.exp(chunk_logits(x32, w32, b32, lo, hi) - base[:, None]) / s[:, None]
                       for lo, hi in bounds], -1)
    return probs.to(dtype), (base + torch.log(s)).to(dtype)


def online_softmax(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, chunk: int):
    """The fused op: fp32 inside, one rounding to the op dtype at the end."""
    x32, w32, b32 = x.float(), w.float(), b.float()
    bounds = chunk_bounds(w.shape[0], chunk)
    m = torch.full((x.shape[0],), NEG_INF, device=x.device)
    s = torch.zeros(x.shape[0], device=x.device)
    for lo, hi in bounds:
        m, s = running_update(m, s, chunk_logits(x32, w32, b32, lo, hi))
    return normalise(x32, w32, b32, bounds, m, s, x.dtype)


class OnlineSoftmax(OpSpec):
    # n = 64 and 32 divide the default chunk of 16; 50, 17 and 5 leave a tail (and 5 is a single short chunk)
    shapes = [{"m": 8, "k": 32, "n": 64}, {"m": 4, "k": 16, "n": 32}, {"m": 5, "k": 24, "n": 50},
              {"m": 3, "k": 16, "n": 17}, {"m": 2, "k": 8, "n": 5}]

    def __init__(self, chunk: int = 16):
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, not {chunk}")
        self.chunk = chunk

    def describe(self) -> str:
        return f"{type(self).__name__}(chunk={self.chunk})"

    def make_inputs(self, shape, dtype, seed):
        m, k, n = shape["m"], shape["k"], shape["n"]
        return {"x": seeded_randn((m, k), 3 * seed, dtype), "w": seeded_randn((n, k), 3 * seed + 1, dtype, k ** -0.5),
                "b": seeded_randn((n,), 3 * seed + 2, dtype, 0.1)}

    def reference(self, x, w, b):
        logits = torch.nn.functional.linear(x, w, b)
        return torch.softmax(logits, -1), torch.logsumexp(logits, -1)

    def fused(self, x, w, b):
        return online_softmax(x, w, b, self.chunk)
