"""A nondeterministic compiler: a decomposition for exp that adds a little random noise (compiled output
changes from run to run while eager is repeatable). The bisector must report it, not bisect it."""
import torch

from tests.planted.decomposition import registered

OP = torch.ops.aten.exp.default


def noisy_exp(x):
    return torch.ops.aten.exp2.default(x * 1.4426950408889634) + torch.rand_like(x) * 1e-3


def planted():
    return registered(OP, noisy_exp)
