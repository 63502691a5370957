"""Pure data movement: transpose, reshape, slice, concat, broadcast. Compiled must be bitwise equal."""
import torch
from torch import nn

from fusecheck.case import Case


class Movement(nn.Module):
    def forward(self, x, y):
        a = x.transpose(1, 2).reshape(x.shape[0], -1)
        b = torch.cat([a[:, :10], y.expand(x.shape[0], -1)], dim=1)
        c = b.unsqueeze(1).expand(-1, 3, -1).permute(0, 2, 1).contiguous()
        return c[:, 1::2], a.flip(1)


def build() -> Case:
    return Case(Movement(), (torch.randn(4, 6, 5), torch.randn(1, 7)), "data_movement")
