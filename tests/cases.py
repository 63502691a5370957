"""Small targets for the checker's own tests, including deliberately bad ones."""
import torch
from torch import nn

from fusecheck.case import Case


class ReturnsNothing(nn.Module):
    def forward(self, x):
        x.sum()


class EmptyOutput(nn.Module):
    def forward(self, x):
        return x[:0] * 2


class AllNaN(nn.Module):
    def forward(self, x):
        return torch.log(-(x.abs() + 1))


class BigRMSNorm(nn.Module):
    """RMSNorm whose input is large: the fp32 upcast is what keeps x^2 from overflowing fp16."""

    def forward(self, x):
        x = x * 300
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + 1e-6)).to(x.dtype)


class IntAndFloat(nn.Module):
    def forward(self, x):
        return x.argmax(-1), (x > 0), x.relu() * 2


def returns_nothing():
    return Case(ReturnsNothing(), (torch.randn(4),), "returns_nothing")


def empty_output():
    return Case(EmptyOutput(), (torch.randn(4, 3),), "empty_output")


def all_nan():
    return Case(AllNaN(), (torch.randn(4, 3),), "all_nan")


def big_rmsnorm():
    return Case(BigRMSNorm(), (torch.randn(8, 256),), "big_rmsnorm")


def int_and_float():
    return (IntAndFloat(), torch.randn(6, 5))


def builder_returns_none():
    return None


class MutatesInput(nn.Module):
    def forward(self, x):
        x.add_(1)
        return x.sin()


class MutatesBuffer(nn.Module):
    """A running statistic updated in place, like BatchNorm in training mode."""

    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(5))

    def forward(self, x):
        self.running.mul_(0.9).add_(0.1 * x.mean(0))
        return x * 2


def mutates_input():
    return Case(MutatesInput(), (torch.randn(8, 5),), "mutates_input")


def mutates_buffer():
    return Case(MutatesBuffer(), (torch.randn(8, 5),), "mutates_buffer")


class NoisyEager(nn.Module):
    """Not bitwise repeatable even in eager (a stand-in for unordered atomics in an eager kernel)."""

    def forward(self, x):
        return x.sin() + torch.randn_like(x) * 1e-6


def noisy_eager():
    return Case(NoisyEager(), (torch.randn(64, 64),), "noisy_eager")
