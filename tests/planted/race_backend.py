"""Planted: a race inside a user's dynamo backend (`fusecheck check --backend tests/planted/race_backend.py:racy`).

The backend runs the graph it is given, correctly; on about `rate` of its calls one row of the first output is
left as the workspace's zeros (a stale read: the row was read before its write landed). The draw is seeded by
the backend's own call counter and the bits of the call's inputs, so a check, and a repeated check, replays
exactly: `--seed` picks fresh inputs and with them fresh draws.

Also here: a tiny model with a `torch.max` (values and indices: a decision op that fusecheck taps on its
registered backends) and the naive backend of a fused-op author, which ignores the graph and returns
`lambda *a: (fused(*a),)` -- it only works when the graph it is handed has the model's own outputs.
"""
from __future__ import annotations

import random
import zlib

import torch


def _bits(args) -> int:
    crc = 0
    for a in args:
        if isinstance(a, torch.Tensor):
            crc = zlib.crc32(a.detach().float().cpu().contiguous().numpy().tobytes(), crc)
    return crc


def racy_backend(rate: float = 0.05, race_seed: int = 0):
    """A dynamo backend that runs the graph and, on ~`rate` of calls, zeroes row 0 of the first output."""
    def backend(gm: torch.fx.GraphModule, example_inputs):
        calls = [0]

        def run(*args):
            out = gm(*args)
            draw = random.Random(f"{race_seed}:{calls[0]}:{_bits(args)}")
            calls[0] += 1
            if rate <= 0 or draw.random() >= rate:
                return out
            seq = list(out) if isinstance(out, (tuple, list)) else [out]
            for i, t in enumerate(seq):
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 1 and t.shape[0] > 0:
                    # BUG (on a hit): row 0 is what the workspace held before the write, zeros
                    seq[i] = torch.cat([torch.zeros_like(t[:1]), t[1:]])
                    break
            return type(out)(seq) if isinstance(out, (tuple, list)) else seq[0]
        return run
    return backend


racy = racy_backend()              # ~5% of calls
clean = racy_backend(rate=0.0)     # the same backend without the race


class MaxSoftmax(torch.nn.Module):
    """linear, then a softmax with its max written out (torch.max: values and indices)."""

    def __init__(self, k: int = 16, n: int = 24):
        super().__init__()
        self.lin = torch.nn.Linear(k, n)

    def forward(self, x):
        logits = self.lin(x)
        m, _ = torch.max(logits, -1, keepdim=True)
        e = torch.exp(logits - m)
        return e / e.sum(-1, keepdim=True)


def model():
    """The target: `tests/planted/race_backend.py:model` (an 8 x 16 input, fp32)."""
    return MaxSoftmax(), (torch.randn(8, 16),)


def fused_linear_softmax(x, w, b, chunk: int = 7):
    """A hand-written fused linear + online max + sum (fp32 inside, chunked over the output features)."""
    x32, w32, b32 = x.float(), w.float(), b.float()
    m = torch.full((x.shape[0], 1), float("-inf"))
    s = torch.zeros(x.shape[0], 1)
    for lo in range(0, w.shape[0], chunk):
        logits = x32 @ w32[lo:lo + chunk].T + b32[lo:lo + chunk]
        m_new = torch.maximum(m, logits.max(-1, keepdim=True).values)
        s = s * torch.exp(m - m_new) + torch.exp(logits - m_new).sum(-1, keepdim=True)
        m = m_new
    return (torch.exp(x32 @ w32.T + b32 - m) / s).to(x.dtype)


def naive(gm: torch.fx.GraphModule, example_inputs):
    """The naive backend: ignore the graph, call the fused op on its inputs. It needs the model's calling
    convention (x and the linear's weight and bias, in some order) and exactly one output."""
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    if len(outs) != 1:
        raise AssertionError(f"the graph handed to a user backend has {len(outs)} outputs; the model has 1")

    def run(*args):
        x = next(a for a in args if a.dim() == 2 and a.shape[1] == 16 and a.shape[0] == 8)
        w = next(a for a in args if a.dim() == 2 and a.shape == (24, 16))
        b = next(a for a in args if a.dim() == 1)
        return (fused_linear_softmax(x, w, b),)
    return run
