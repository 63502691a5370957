"""Small tensors on an accelerator are compared on a host copy.

Why: a comparison on a GPU pays launches and synchronisations whatever the tensor's size (the torch core
~200 launches, ~6 ms a tensor on the H200; the Triton kernel's launches, reductions and transfer ~1 ms), and a
model's check judges hundreds of small gradients. Below HOST_ELEMS elements, one transfer of the tensors (at
most a few hundred KiB) and the CPU's C core (tens of microseconds) cost less than one round of launches.
The cores compute the same accumulators to fp64 rounding (tests/compare/test_compare_equivalence.py), so
where a comparison runs changes no verdict. `FUSECHECK_HOST_SMALL=0` keeps every tensor on its device.
"""
from __future__ import annotations

import os

import torch

from fusecheck.devices import PLAIN_TENSORS

HOST_ELEMS = 1 << 16
ENV = "FUSECHECK_HOST_SMALL"


def _movable(tensors: list) -> bool:
    present = [t for t in tensors if t is not None]
    if os.environ.get(ENV, "1") == "0" or not present:
        return False
    if not all(type(t) in PLAIN_TENSORS for t in present) or torch.compiler.is_compiling():
        return False
    device, numel = present[0].device, present[0].numel()
    # every accelerator tensor on one device (a device mismatch is left for the structural check to report),
    # every tensor the same small size
    return (device.type != "cpu" and all(t.device in (device, torch.device("cpu")) for t in present)
            and all(t.numel() == numel for t in present) and numel < HOST_ELEMS)


def to_host(*tensors):
    """The tensors copied to the CPU (one synchronisation for all) when they are small and on one
    accelerator; otherwise as given. None stays None."""
    if not _movable(list(tensors)):
        return tensors
    device = next(t.device for t in tensors if t is not None)
    non_blocking = device.type == "cuda"  # into pinned memory, then one wait on the stream that made them
    with torch.no_grad():
        hosts = tuple(None if t is None else t.detach().to("cpu", non_blocking=non_blocking) for t in tensors)
    if non_blocking:
        torch.cuda.current_stream(device).synchronize()
    return hosts
