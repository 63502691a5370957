"""Tensor collectives under the names of whichever torch is installed (2.13 renamed the *_into_tensor ones).

Looked up at call time, so the stress wrappers (`fusecheck.dist.stress`) see every call.
"""
from __future__ import annotations

import torch.distributed as dist


def all_gather_tensor(out, inp, group=None, async_op=False):
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(out, inp, group=group, async_op=async_op)


def reduce_scatter_tensor(out, inp, group=None, async_op=False):
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return fn(out, inp, group=group, async_op=async_op)
