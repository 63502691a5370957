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

import contextlib
from typing import Iterator

import torch

from fusecheck.runs.execute import RunResult

PARK_MIN_BYTES = 1 << 30
_SECTIONS = ("outputs", "grads", "after")


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # a subclass (DTensor, a fake tensor) stays where it is


def _on(device: torch.device, t) -> bool:
    # "cuda" names whichever GPU is current; a tensor names its index
    return type(t) in _PLAIN and t.device.type == device.type and (
        device.index is None or t.device.index == device.index)


def _tensors(dicts, device: torch.device) -> list[tuple[dict, str, torch.Tensor]]:
    return [(d, k, t) for d in dicts for k, t in d.items() if _on(device, t)]


def _sections(result: RunResult) -> list[dict]:
    return [getattr(result, s) for s in _SECTIONS]


def _worth(entries, device: torch.device) -> bool:
    held = sum(t.numel() * t.element_size() for _, _, t in entries)
    return device.type != "cpu" and held >= PARK_MIN_BYTES


def worth_parking(result: RunResult, device: torch.device) -> bool:
    return _worth(_tensors(_sections(result), device), device)


def _to_host(entries, device: torch.device) -> list[tuple[dict, str, torch.Tensor, torch.device]]:
    """Each tensor copied into (pinned, on CUDA) host memory and put in its dict in place of the device one;
    with the device it came from."""
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
    return moved


@contextlib.contextmanager
def parked(result: RunResult, device: torch.device, *, restore: bool = True,
           force: bool = False) -> Iterator[dict[str, torch.device]]:
    """Inside: `result`'s tensors on `device` live on the host (yields each moved key's own device, empty when
    none); on exit they are back there, bit for bit, in the same dicts under the same keys, or with
    `restore=False` they stay on the host for their reader to bring back one at a time (to the device yielded
    for it: a result on another GPU than the run's must still read as on another GPU). `force` (tests) moves them whatever their
    size and device."""
    if not (force or worth_parking(result, device)):
        yield {}
        return
    pin = torch.cuda.is_available() and device.type == "cuda"
    moved = _to_host(_tensors(_sections(result), device), device)
    try:
        yield {k: where for _, k, _, where in moved}
    finally:
        if restore:
            with torch.no_grad():
                for d, k, host, where in moved:
                    d[k] = host.to(where, non_blocking=pin)
                if pin:
                    torch.cuda.current_stream(device).synchronize()
