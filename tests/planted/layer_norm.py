"""A harmful decomposition for an op Inductor has no lowering of (native_layer_norm: without its
decomposition it becomes an aten fallback): layer norm as E[x^2]-E[x]^2, cache cleared both ways."""
import contextlib

import torch

from tests.planted.decomposition import _clear

OP = torch.ops.aten.native_layer_norm.default


def naive_layer_norm(x, shape, weight, bias, eps):
    """The planted bug: one-pass variance."""
    dims = list(range(x.dim() - len(shape), x.dim()))
    mean = x.mean(dims, keepdim=True)
    rstd = torch.rsqrt((x * x).mean(dims, keepdim=True) - mean * mean + eps)
    y = (x - mean) * rstd
    y = y * weight if weight is not None else y
    return (y + bias if bias is not None else y), mean, rstd


@contextlib.contextmanager
def planted():
    from torch._inductor import decomposition as inductor_decomp
    table = inductor_decomp.decompositions
    saved = table.get(OP)
    table[OP] = naive_layer_norm
    _clear()
    try:
        yield
    finally:
        if saved is None:
            table.pop(OP, None)
        else:
            table[OP] = saved
        _clear()
