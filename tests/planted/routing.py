"""A tiny mixture of experts whose compiled graph alone may change its router's scores.

Experts 0 and 1 have identical router columns, so every token's scores for them tie exactly (in fp64 and in
the run dtype); `nudge` moves the two apart by a benign 1e-6 relative inside the compiled graph only (what a
different summation order does), which flips half those ties whichever way topk breaks them. `misroute` is a
bug: every fourth token's best expert is masked out inside the compiled graph, so it goes to its runner-up
whatever the gap.
"""
from __future__ import annotations

import torch
from torch import nn



def _split_the_ties(s: torch.Tensor) -> torch.Tensor:
    """Expert 0 lifted and expert 1 lowered by 1e-6 relative on even tokens, the reverse on odd ones: whatever
    topk's tie-break, half the tied tokens change expert."""
    sign = 1.0 - 2.0 * (torch.arange(s.shape[0], device=s.device) % 2).to(s.dtype)
    lift = torch.zeros_like(s)
    lift[:, 0], lift[:, 1] = sign, -sign
    return s * (1 + 1e-6 * lift)


PLANTS = {
    "none": lambda s: s,
    "nudge": _split_the_ties,
    "misroute": lambda s: s.masked_fill(
        (torch.arange(s.shape[0], device=s.device) % 4 == 0)[:, None]
        & (s == s.amax(-1, keepdim=True)), float("-inf")),
}


class TopOneMoE(nn.Module):
    def __init__(self, dim: int = 16, experts: int = 4, plant: str = "none"):
        super().__init__()
        self.router = nn.Linear(dim, experts, bias=False)
        with torch.no_grad():
            self.router.weight[1] = self.router.weight[0]  # experts 0 and 1 tie on every token
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, dim), nn.Tanh()) for _ in range(experts))
        self.plant = PLANTS[plant]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.router(x).softmax(-1)
        if torch.compiler.is_compiling():
            scores = self.plant(scores)
        weight, chosen = scores.topk(1, dim=-1)
        out = torch.stack([e(x) for e in self.experts], 1)  # [tokens, experts, dim]
        picked = out.gather(1, chosen[:, :, None].expand(-1, -1, x.shape[-1])).squeeze(1)
        return picked * weight


class Stacked(nn.Module):
    """Two MoE layers in a ModuleList: the golden is streamed block by block, checkpointed under --train."""

    def __init__(self, plant: str = "none"):
        super().__init__()
        self.layers = nn.ModuleList(TopOneMoE(plant=plant) for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x
