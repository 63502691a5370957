"""A nondeterministic compiler: a decomposition for exp that adds a little random noise (compiled output
changes from run to run while eager is repeatable). The bisector must report it, not bisect it."""
import contextlib

import torch
from torch._inductor import decomposition as inductor_decomp

from tests.planted.decomposition import _clear

OP = torch.ops.aten.exp.default


def noisy_exp(x):
    return torch.ops.aten.exp2.default(x * 1.4426950408889634) + torch.rand_like(x) * 1e-3


@contextlib.contextmanager
def planted():
    table = inductor_decomp.decompositions
    saved = table.get(OP)
    table[OP] = noisy_exp
    _clear()
    try:
        yield
    finally:
        if saved is None:
            table.pop(OP, None)
        else:
            table[OP] = saved
        _clear()
