"""A harmful lowering: Inductor's own lowering of `exp` quantizes its result. Falling back to the aten
kernel (the lowering refused) is exact."""
import contextlib

import torch
from torch._inductor import ir, lowering

from tests.planted.quantize import quantize_ops

OP = torch.ops.aten.exp.default


@contextlib.contextmanager
def planted():
    orig = lowering.lowerings[OP]

    def lossy_exp(*args, **kwargs):
        out = orig(*args, **kwargs)
        loader = out.make_loader()
        return ir.Pointwise.create(device=out.get_device(), dtype=out.get_dtype(),
                                   inner_fn=lambda index: quantize_ops(loader(index)), ranges=list(out.get_size()))

    lowering.lowerings[OP] = lossy_exp
    try:
        yield
    finally:
        lowering.lowerings[OP] = orig
