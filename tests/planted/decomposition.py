"""A harmful decomposition registered for one op: var_mean as E[x^2] - E[x]^2 (catastrophic cancellation
when the mean is large), put into Inductor's table the way a contributor would, cache cleared both ways."""
import contextlib

import torch
from torch._inductor import decomposition as inductor_decomp

aten = torch.ops.aten
OP = aten.var_mean.correction


def naive_var_mean(x, dim=None, *, correction=None, keepdim=False):
    """The planted bug: one-pass variance."""
    n = x.numel() if dim is None else 1
    for d in ([] if dim is None else dim):
        n *= x.shape[d]
    mean = torch.mean(x, dim, keepdim=True)
    mean_sq = torch.mean(x * x, dim, keepdim=True)
    c = 1 if correction is None else correction
    var = (mean_sq - mean * mean) * (n / max(n - c, 1))
    if not keepdim:
        var, mean = var.squeeze(dim), mean.squeeze(dim)
    return var, mean


def _clear():
    for fn in (getattr(inductor_decomp, "fast_random_decomps", None), getattr(inductor_decomp, "select_decomp_table", None)):
        if hasattr(fn, "cache_clear"):
            fn.cache_clear()


@contextlib.contextmanager
def registered(op, fn):
    """Put `fn` into Inductor's decomposition table for `op`, the way a contributor would; restore on exit.
    Inductor caches its table (lru_cache), so the cache is cleared on the way in and on the way out."""
    table = inductor_decomp.decompositions
    saved = table.get(op)
    table[op] = fn
    _clear()
    try:
        yield
    finally:
        if saved is None:
            table.pop(op, None)
        else:
            table[op] = saved
        _clear()


def planted():
    return registered(OP, naive_var_mean)
