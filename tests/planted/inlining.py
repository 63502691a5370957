"""A harmful inlining: when lowering inlines an `exp` into its consumers (instead of realizing it into a
buffer), the inlined computation is quantized. Realized, `exp` is stored and loaded exactly."""
import contextlib

import torch
from torch._inductor import ir

from tests.planted.quantize import quantize_ops

TARGET = torch.ops.aten.exp.default


def _from_target(pw):
    return any(getattr(o, "target", None) is TARGET for o in (getattr(pw, "origins", None) or ()))


@contextlib.contextmanager
def planted():
    box = ir.StorageBox
    had_own = "make_loader" in box.__dict__
    orig = box.make_loader

    def make_loader(self):
        loader = orig(self)
        if isinstance(self.data, ir.Pointwise) and _from_target(self.data):  # unrealized: being inlined
            return lambda index: quantize_ops(loader(index))
        return loader

    box.make_loader = make_loader
    try:
        yield
    finally:
        if had_own:
            box.make_loader = orig
        else:
            del box.make_loader
