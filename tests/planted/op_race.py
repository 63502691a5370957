"""Planted: a stale-read race. With probability `rate` per call (seeded per call: the spec's own call counter,
`race_seed` and the inputs' bits, so a failing run replays), the running-sum update of one chunk reads the
accumulator as it was before that chunk's partial sum landed -- the chunk's contribution is lost, as when two
cores update the sum and one reads before the other's write is visible. Every other call is the correct kernel."""
from __future__ import annotations

import random
import zlib

import torch

from op_kernel import NEG_INF, OnlineSoftmax, chunk_bounds, chunk_logits, normalise, running_update


class StaleReadRace(OnlineSoftmax):
    def __init__(self, chunk: int = 16, rate: float = 0.05, race_seed: int = 0):
        super().__init__(chunk)
        self.rate, self.race_seed, self.calls = rate, race_seed, 0

    def fused(self, x, w, b):
        # per call: the spec's own counter, its race_seed and the inputs' bits (a backend that is loaded anew
        # for every check restarts the counter; fresh inputs still draw afresh)
        bits = zlib.crc32(x.detach().float().cpu().numpy().tobytes())
        draw = random.Random(f"{self.race_seed}:{self.calls}:{bits}")
        self.calls += 1
        bounds = chunk_bounds(w.shape[0], self.chunk)
        stale = draw.randrange(len(bounds)) if draw.random() < self.rate else None
        x32, w32, b32 = x.float(), w.float(), b.float()
        m = torch.full((x.shape[0],), NEG_INF, device=x.device)
        s = torch.zeros(x.shape[0], device=x.device)
        for j, (lo, hi) in enumerate(bounds):
            m_new, s_new = running_update(m, s, chunk_logits(x32, w32, b32, lo, hi))
            # BUG (on a hit): the stale accumulator, rescaled, is kept; this chunk's exponentials are lost
            s = s * torch.exp(m - m_new).nan_to_num(1.0) if j == stale else s_new
            m = m_new
        return normalise(x32, w32, b32, bounds, m, s, x.dtype)


def fused_backend(rate: float = 0.05, race_seed: int = 0):
    """A dynamo backend (`check --backend tests/planted/op_race.py:backend`) that ignores the graph and calls
    the racing kernel: the naive backend of a fused-op author, `lambda *a: fused(*a)`."""
    op = StaleReadRace(rate=rate, race_seed=race_seed)

    def backend(gm, example_inputs):
        return lambda *a: (op.fused(*a)[0],)
    return backend


backend = fused_backend()
backend_30 = fused_backend(rate=0.3)  # the same race, frequent: a test catches it in a few checks


def chain(x, w, b):
    """The unfused chain the fused op replaces, with its max written out (the op's `online max + sum`)."""
    logits = torch.nn.functional.linear(x, w, b)
    m = logits.max(-1, keepdim=True).values
    e = torch.exp(logits - m)
    return e / e.sum(-1, keepdim=True)


def case():
    """`fusecheck check tests/planted/op_race.py:case --backend tests/planted/op_race.py:backend --repeat N`."""
    from fusecheck.case import Case
    spec = StaleReadRace()
    inputs = spec.make_inputs({"m": 5, "k": 24, "n": 50}, torch.float32, int(torch.initial_seed()) % 1000)
    return Case(chain, (inputs["x"], inputs["w"], inputs["b"]), "linear_online_softmax")


def naive_backend(gm, example_inputs):
    """The correct kernel through the naive backend of issue 20: `lambda *a: (fused(*a),)`."""
    op = OnlineSoftmax()
    return lambda *a: (op.fused(*a)[0],)
