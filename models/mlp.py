"""MLP: Linear -> GELU -> LayerNorm -> Linear. Exercises matmul epilogues, a transcendental and a reduction."""
import torch
from torch import nn

from fusecheck.case import Case


class MLP(nn.Module):
    def __init__(self, dim: int = 64, hidden: int = 128):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.norm(self.act(self.fc1(x))))


def build() -> Case:
    return Case(MLP(), (torch.randn(8, 64),), "mlp")
