"""Swap a piece's parameters and buffers for high-precision copies, and back.

The copies live only while the piece runs: on exit the original (run-dtype) tensors are put back and the
copies are freed with the last reference. With `leaves`, parameter copies are autograd leaves, so a
backward pass through the piece leaves their fp64 gradients on them. Tensors shared by several modules of
one piece (tied weights) get one copy, so their gradient is the sum of every use, as in the model.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from fusecheck.runs.cast import COMPLEX_OF
from fusecheck.golden.streamed.internal import internal


def upcast_tensor(t: torch.Tensor, dtype: torch.dtype, device: torch.device | None) -> torch.Tensor:
    """A detached `dtype` copy of `t` on `device` (what `model.to(dtype)` makes of it: the upcast is exact).
    Made under `internal()`: while the streamed golden's guard is on, `t` may be a guarded original."""
    with internal():
        t = t.detach()
        if t.is_complex() and dtype in COMPLEX_OF:
            return t.to(device=device, dtype=COMPLEX_OF[dtype])
        if t.is_floating_point():
            return t.to(device=device, dtype=dtype)
        return t.to(device=device) if device is not None else t


@contextlib.contextmanager
def upcast(module: torch.nn.Module, dtype: torch.dtype, device: torch.device | None = None, *,
           recurse: bool = True, leaves: bool = False) -> Iterator[dict[int, tuple[torch.nn.Parameter, torch.Tensor]]]:
    """Within the block, every tensor `module` (and, with `recurse`, its submodules) owns is a `dtype` copy.

    Yields {id(original parameter): (original, copy)} for the parameters swapped, so a caller can read the
    copies' gradients and attribute them to the original names.
    """
    memo: dict[int, torch.Tensor] = {}
    params: dict[int, tuple[torch.nn.Parameter, torch.Tensor]] = {}
    undo: list[tuple[dict, str, torch.Tensor]] = []

    def copy_of(t: torch.Tensor, is_param: bool) -> torch.Tensor:
        if id(t) not in memo:
            c = upcast_tensor(t, dtype, device)
            if is_param and leaves and t.requires_grad and (c.is_floating_point() or c.is_complex()):
                c = c.requires_grad_(True)
            memo[id(t)] = c
            if is_param:
                params[id(t)] = (t, c)
        return memo[id(t)]

    modules = module.modules() if recurse else (module,)
    try:
        for m in modules:
            for slots, is_param in ((m._parameters, True), (m._buffers, False)):
                for name, t in list(slots.items()):
                    if t is not None:
                        undo.append((slots, name, t))
                        slots[name] = copy_of(t, is_param)
        yield params
    finally:
        for slots, name, t in reversed(undo):
            slots[name] = t
