"""The smallest target the toggle tests compile (matrix rows, promises, interactions): one 32x32 tanh layer of
a batch of 8 rows; `build_centred` also subtracts each row's max (a reduction for the reduction toggles)."""
import torch

BATCH = 8


class Tiny(torch.nn.Module):
    def __init__(self, centred: bool):
        super().__init__()
        self.centred = centred
        self.w = torch.nn.Parameter(torch.randn(32, 32) / 6)

    def forward(self, x):
        y = torch.tanh(x @ self.w) * 1.5 + 0.25
        return y - y.amax(-1, keepdim=True) if self.centred else y


def build():
    return Tiny(centred=False), (torch.randn(BATCH, 32),)


def build_centred():
    return Tiny(centred=True), (torch.randn(BATCH, 32),)
