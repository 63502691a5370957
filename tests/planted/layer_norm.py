"""A harmful decomposition for an op Inductor has no lowering of (native_layer_norm: without its
decomposition it becomes an aten fallback): layer norm as E[x^2]-E[x]^2, cache cleared both ways."""
import torch

from tests.planted.decomposition import registered

OP = torch.ops.aten.native_layer_norm.default


def naive_layer_norm(x, shape, weight, bias, eps):
    """The planted bug: one-pass variance."""
    dims = list(range(x.dim() - len(shape), x.dim()))
    mean = x.mean(dims, keepdim=True)
    rstd = torch.rsqrt((x * x).mean(dims, keepdim=True) - mean * mean + eps)
    y = (x - mean) * rstd
    y = y * weight if weight is not None else y
    return (y + bias if bias is not None else y), mean, rstd


def planted():
    return registered(OP, naive_layer_norm)
