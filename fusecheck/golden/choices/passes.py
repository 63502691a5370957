"""How many golden passes a check needs, given the choices eager and compiled made.

- no decision: one pass, as before (no dispatch mode at all);
- compiled chose as eager did everywhere: one pass whose golden follows that common choice at near-ties;
- otherwise two: the first follows eager's choices and only measures eager's error, the second follows
  compiled's and judges the rows. Each run is judged against the fp64 computation of its own near-tied
  choices, and never against the other run's.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch

from fusecheck.golden.choices.follow import Call, Followed, Follower

Sink = Callable[[str, torch.Tensor], None]


def same_choices(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Two runs made the same choice at every decision."""
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y.to(x.device)) for x, y in zip(a, b))


def golden_passes(eager: list[Call], compiled: list[torch.Tensor], judge,
                  tie: float) -> Iterator[tuple[Follower, Sink]]:
    """(follower to run the golden under, sink for its results), one per golden pass."""
    if not eager:
        yield _NoDecisions(), judge.judge  # no dispatch mode: the golden runs as fast as before
        return
    eager_choices = [c.choice for c in eager]
    if same_choices(eager_choices, compiled):
        yield Follower("compiled (as eager)", eager_choices, eager, tie), judge.judge
        return
    first = Follower("eager", eager_choices, eager, tie)
    yield first, judge.measure_eager
    yield Follower("compiled", compiled, eager, tie, noise=first.noise), judge.judge


class _NoDecisions(contextlib.nullcontext):
    report = Followed("compiled")
