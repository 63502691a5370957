"""A run's results wait on the host while a repeat run needs the accelerator's memory.

Why: a whole-model compiled backward returns every gradient at once, so the repeat compiled run holds a
model's worth of gradients while eager's results and the first compiled run's (both kept for the judge) are
held too: four times the model plus activations (Llama-8B shape `--train` on the H200: 4.6x). The first run's
results are copied to pinned host memory before the repeat run and back after it: two transfers over the
host link (~1 s for 16 GB), against a model's worth of device memory at the peak. Below PARK_MIN_BYTES the
results cost less memory than the transfers cost time, and on the host itself there is nowhere to move them.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from fusecheck.runs.execute import RunResult

PARK_MIN_BYTES = 1 << 30
_SECTIONS = ("outputs", "grads", "after")


def _tensors(result: RunResult, device: torch.device) -> list[tuple[dict, str, torch.Tensor]]:
    return [(d, k, t) for d in (getattr(result, s) for s in _SECTIONS) for k, t in d.items()
            if isinstance(t, torch.Tensor) and t.device == device]


def worth_parking(result: RunResult, device: torch.device) -> bool:
    held = sum(t.numel() * t.element_size() for _, _, t in _tensors(result, device))
    return device.type != "cpu" and held >= PARK_MIN_BYTES


@contextlib.contextmanager
def parked(result: RunResult, device: torch.device, *, force: bool = False) -> Iterator[bool]:
    """Inside: `result`'s tensors on `device` live on the host (yields whether they moved); on exit they are
    back on `device`, bit for bit, in the same dicts under the same keys. `force` (tests) moves them whatever
    their size and device."""
    if not (force or worth_parking(result, device)):
        yield False
        return
    pin = torch.cuda.is_available() and device.type == "cuda"
    moved = []
    with torch.no_grad():
        for d, k, t in _tensors(result, device):
            host = torch.empty_like(t, device="cpu", pin_memory=pin)
            host.copy_(t, non_blocking=pin)
            moved.append((d, k, host))
        if pin:
            torch.cuda.current_stream(device).synchronize()
        for d, k, host in moved:
            d[k] = host  # the device copy's last reference: freed
    try:
        yield True
    finally:
        with torch.no_grad():
            for d, k, host in moved:
                d[k] = host.to(device, non_blocking=pin)
            if pin:
                torch.cuda.current_stream(device).synchronize()
