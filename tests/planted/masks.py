"""Gradient routing decisions: relu masks and max-pool argmaxes that a benign compiled graph may take the other
way at exact ties, and a relu that is wrong.

`ReluNet`: the hidden units 0-3 of every token are exactly 0 before the relu in any precision (u - u.detach():
the value cancels, the gradient does not), so relu's mask there is a tie; `nudge` lifts them by 1e-7 inside the
compiled graph only (benign: far below fp32 noise at that layer's scale), so compiled lets the gradient through
where eager and the golden do not. `cut` is a bug: compiled's relu also zeroes every hidden value below 0.5.
`ClipNet`: the same with relu6 (hardtanh 0..6), whose backward reads its input: units 0-1 sit exactly on 6,
units 2-3 on 0; `nudge` moves both inside (0 + 1e-7, 6 - 1e-6) in the compiled graph only; `cut` zeroes every
hidden value below 0.5 as well.
`PoolNet`: every 2x2 window holds two equal maxima; `nudge` favours the odd column inside the compiled graph.
"""
from __future__ import annotations

import torch
from torch import nn


class ReluNet(nn.Module):
    def __init__(self, plant: str = "none", dim: int = 16, hidden: int = 32):
        super().__init__()
        self.up, self.down, self.plant = nn.Linear(dim, hidden, bias=False), nn.Linear(hidden, dim), plant

    def forward(self, x):
        h = self.up(x)
        tied = (torch.arange(h.shape[-1], device=h.device) < 4).to(h.dtype)
        h = h - tied * h.detach()  # units 0-3: exactly 0, with the gradient of h
        if torch.compiler.is_compiling() and self.plant == "nudge":
            h = h + 1e-7 * tied
        out = torch.relu(h)
        if torch.compiler.is_compiling() and self.plant == "cut":
            out = torch.where(h < 0.5, torch.zeros_like(out), out)
        return self.down(out)


class ClipNet(ReluNet):
    def forward(self, x):
        h = self.up(x)
        unit = torch.arange(h.shape[-1], device=h.device)
        top, bottom = (unit < 2).to(h.dtype), ((unit >= 2) & (unit < 4)).to(h.dtype)
        h = h - (top + bottom) * h.detach() + 6.0 * top  # units 0-1: exactly 6, 2-3: exactly 0
        if torch.compiler.is_compiling() and self.plant == "nudge":
            h = h + 1e-7 * bottom - 1e-6 * top
        out = nn.functional.relu6(h)
        if torch.compiler.is_compiling() and self.plant == "cut":
            out = torch.where(h < 0.5, torch.zeros_like(out), out)
        return self.down(out)


def relu_inputs(tokens: int = 32, dim: int = 16) -> torch.Tensor:
    return torch.randn(tokens, dim)


class PoolNet(nn.Module):
    def __init__(self, plant: str = "none"):
        super().__init__()
        self.conv, self.plant = nn.Conv2d(2, 2, 1), plant

    def forward(self, x):
        h = self.conv(x)
        if torch.compiler.is_compiling() and self.plant == "nudge":
            h = h + 1e-6 * (torch.arange(h.shape[-1], device=h.device) % 2).to(h.dtype)
        return nn.functional.max_pool2d(h, 2, 2)


def pool_inputs() -> torch.Tensor:
    x = torch.randn(2, 2, 4, 2).repeat_interleave(2, dim=-1)  # each 2x2 window: two columns equal
    return x
