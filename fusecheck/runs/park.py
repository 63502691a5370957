"""A run's results wait on the host while the accelerator's memory is needed for something else.

Why: a whole-model compiled backward returns every gradient at once, so the repeat compiled run holds a
model's worth of gradients while eager's results and the first compiled run's (both kept for the judge) are
held too: four times the model plus activations (Llama-8B shape `--train` on the H200: 4.6x). The first run's
results are copied to pinned host memory before the repeat run and stay there while the golden runs too,
coming back one row at a time as the judge reaches each (`RowJudge.parked`): one pinned allocation and a
transfer each way over the host link (~1 s for 16 GB), against a model's worth of device memory at the peak.
Below PARK_MIN_BYTES the results cost less memory than the transfers cost time, and on the host itself there
is nowhere to move them.
"""
from __future__ import annotations

import torch

from fusecheck.devices import PLAIN_TENSORS
from fusecheck.runs.execute import RunResult

PARK_MIN_BYTES = 1 << 30
_SECTIONS = ("outputs", "grads", "after")


def _on(device: torch.device, t) -> bool:
    # "cuda" names whichever GPU is current; a tensor names its index
    return type(t) in PLAIN_TENSORS and t.device.type == device.type and (
        device.index is None or t.device.index == device.index)


def _worth(entries, device: torch.device) -> bool:
    held = sum(t.numel() * t.element_size() for _, _, t in entries)
    return device.type != "cpu" and held >= PARK_MIN_BYTES


def park(result: RunResult, device: torch.device, *, force: bool = False,
         pin: bool | None = None) -> dict[str, torch.device]:
    """`result`'s tensors on `device` copied into (pinned, on CUDA) host memory and put in their dicts in
    place of the device ones, when they are worth it (`force`, for tests: whatever their size and device).
    Returns each moved key's own device: its reader brings it back there (a result on another GPU than the
    run's must still read as on another GPU). `pin`: page-locked host memory (default on CUDA;
    benchmarks/park_cost.py times both)."""
    entries = [(d, k, t) for d in (getattr(result, s) for s in _SECTIONS) for k, t in d.items() if _on(device, t)]
    if not (force or _worth(entries, device)):
        return {}
    if pin is None:
        pin = device.type == "cuda" and torch.cuda.is_available()
    moved = []
    with torch.no_grad():
        for d, k, t in entries:
            host = torch.empty_like(t, device="cpu", pin_memory=pin)
            host.copy_(t, non_blocking=pin)
            moved.append((d, k, host, t.device))
        if pin:
            torch.cuda.current_stream(device).synchronize()
        for d, k, host, _ in moved:
            d[k] = host  # the device copy's last reference: freed
    return {k: where for _, k, _, where in moved}
