"""Registry of collectives: each with its invariant (what rank i must hold, simulated locally from every
rank's input), its tag scheme for layer 1, and its shape preconditions. Adding a collective is one entry."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from fusecheck.dist.tags import MOVE, SUM, TagScheme


@dataclass(frozen=True)
class Collective:
    name: str
    invariant: str
    tags: TagScheme
    deliver: Callable[[list[torch.Tensor], int], torch.Tensor]   # all ranks' inputs, rank -> what rank receives
    precondition: Callable[[list[torch.Tensor], int], str | None]


def _same_shapes(xs: list[torch.Tensor], world: int) -> str | None:
    shapes = {tuple(x.shape) for x in xs}
    return None if len(shapes) == 1 else f"ranks' inputs differ in shape: {sorted(shapes)}"


def _split_dim0(xs: list[torch.Tensor], world: int) -> str | None:
    return _same_shapes(xs, world) or (None if xs[0].shape[0] % world == 0 else
                                       f"dim 0 ({xs[0].shape[0]}) is not divisible by world size {world}")


def _exact_sum(xs: list[torch.Tensor]) -> torch.Tensor:
    """Sum in fp64 and round once: the reference value a collective should deliver."""
    return torch.stack([x.double() for x in xs]).sum(0).to(xs[0].dtype)


def _rows(x: torch.Tensor, world: int, i: int) -> torch.Tensor:
    n = x.shape[0] // world
    return x[i * n:(i + 1) * n]


COLLECTIVES: dict[str, Collective] = {
    "all_gather": Collective(
        "all_gather", "rank-order concatenation along dim 0; length world x local", MOVE,
        lambda xs, r: torch.cat(xs, 0), _same_shapes),
    "all_reduce": Collective(
        "all_reduce", "every rank holds the elementwise sum of all ranks' inputs", SUM,
        lambda xs, r: _exact_sum(xs), _same_shapes),
    "reduce_scatter": Collective(
        "reduce_scatter", "rank i holds shard i (dim 0) of the elementwise sum", SUM,
        lambda xs, r: _rows(_exact_sum(xs), len(xs), r), _split_dim0),
    "all_to_all_single": Collective(
        "all_to_all_single", "block j of rank i's output is block i of rank j's input (equal splits, dim 0)", MOVE,
        lambda xs, r: torch.cat([_rows(x, len(xs), r) for x in xs], 0), _split_dim0),
}
