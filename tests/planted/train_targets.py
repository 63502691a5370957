"""Targets for `fusecheck train` tests: ones that bring their own data stream and loss, and bad ones."""
import torch
from torch import nn

from fusecheck.case import Case


class Regressor(nn.Module):
    def __init__(self, dim: int = 16, hidden: int = 32):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, 1)

    def forward(self, x, y):
        return self.fc2(torch.tanh(self.fc1(x)))


_W = torch.Generator().manual_seed(7)
_TRUE = torch.randn(16, 1, generator=_W)


def batches(step: int):
    """A new batch every step, a pure function of the step (every trajectory asks for the same one)."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(32, 16, generator=g)
    return x, x @ _TRUE


def loss(output, batch):
    return ((output - batch[1]) ** 2).mean()  # in the run's dtype: fp64 in the shadow


def build() -> Case:
    return Case(Regressor(), batches(0), "regressor")


def no_parameters() -> Case:
    return Case(nn.ReLU(), (torch.randn(4, 4),), "no_parameters")


def not_a_module() -> Case:
    return Case(lambda x: x * 2, (torch.randn(4, 4),), "plain_function")


def bad_loss() -> Case:
    case = Case(Regressor(), batches(0), "bad_loss")
    case.loss = lambda output, batch: output  # not a scalar
    return case
