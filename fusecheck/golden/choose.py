"""Which golden `--golden auto` runs: the whole fp64 copy when it is small and fits in the golden device's free
memory with headroom, the streamed golden otherwise.

Why: the whole copy is the reference the streamed golden is tested against; the streamed one holds one block in
fp64 at a time, with hooks and per-block upcasts. Measured with the judge its own phase (docs/benchmarks.md),
the streamed golden takes 1.3x the copy's time at 1.1B `--train` on the H200 (0.33 s against 0.25 s warm) and
0.6x at 0.52B `--train` on 2 CPU cores (the copy's fresh pages cost more than the hooks): either way a few
percent of a check its compile dominates, while the copy is the check's largest memory (4x a bf16 model, and
its gradients with --train: torch's own accuracy check holds exactly that). So the copy is taken only while it
is small (WHOLE_MAX_BYTES: less than a process running torch and a compile holds anyway) and fits; above, the
model streams. The whole copy's peak is modelled from eager's own run: eager held the model (parameters,
buffers) and, at its peak, grew by its activations (and gradients with --train); the fp64 copy holds the same
tensors at golden/run itemsize times the bytes. Both goldens give the same rows
(tests/golden/test_streamed_family.py); the report says which one ran and why.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fusecheck.dtypes import short_name
from fusecheck.runs.memory import gib, grown, host_available

HEADROOM = 2.0  # allocator fragmentation, the upcast copies made while the fp64 model is built, the estimate's error
WHOLE_MAX_BYTES = 1 << 30  # a larger copy streams: its memory would be the check's largest cost


@dataclass(frozen=True)
class Choice:
    mode: str   # "whole" | "streamed"
    why: str    # the report's note


def available_bytes(device: torch.device) -> int | None:
    """Free memory on the golden's device now; None where it cannot be read (the streamed golden is then kept)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type == "cpu":
        return host_available()
    return None


def floating_dtype(model: torch.nn.Module, requested: torch.dtype | None) -> torch.dtype:
    """The dtype the run computed in: the one asked for, else the model's first floating parameter's."""
    if requested is not None:
        return requested
    return next((t.dtype for t in model.parameters() if t.is_floating_point()), torch.float32)


def whole_copy_bytes(model_bytes: int, eager_grew: int, run_dtype: torch.dtype, golden_dtype: torch.dtype) -> int:
    """The whole fp64 copy's peak: eager's model and growth at the golden's itemsize."""
    scale = max(1.0, torch.finfo(golden_dtype).bits / torch.finfo(run_dtype).bits) if run_dtype.is_floating_point \
        else 1.0
    return int((model_bytes + eager_grew) * scale)


def choose(model_bytes: int, eager_phase: dict[str, int], run_dtype: torch.dtype, golden_dtype: torch.dtype,
           device: torch.device, free: int | None = None, grad_bytes: int = 0) -> Choice:
    """For a model with blocks under --golden auto: whole when its estimated peak is at most WHOLE_MAX_BYTES and
    HEADROOM x that fits in `free` (read from the device when not given), else streamed. `grad_bytes` (the
    parameters that take gradients, with --train) bounds eager's growth from below: eager kept that many bytes
    of gradients, and a host measurement that saw less was the allocator reusing pages freed before the phase
    (the model's build), not a smaller run."""
    free = available_bytes(device) if free is None else free
    eager_grew = grown(eager_phase)
    if eager_grew is not None:
        eager_grew = max(eager_grew, grad_bytes)
    if free is None or eager_grew is None:
        return Choice("streamed", f"golden: streamed, one block at a time (free memory on {device.type} could not be "
                                  "read, so the whole fp64 copy was not risked; --golden whole runs it)")
    need = whole_copy_bytes(model_bytes, eager_grew, run_dtype, golden_dtype)
    name = short_name(str(golden_dtype)) or str(golden_dtype)
    sizes = f"about {gib(need)} for the {name} copy, {gib(free)} free on {device.type}"
    if need > WHOLE_MAX_BYTES:
        return Choice("streamed", f"golden: streamed, one block at a time ({sizes}: a copy over "
                                  f"{gib(WHOLE_MAX_BYTES)} would be the check's largest memory; --golden whole "
                                  "forces it)")
    if need * HEADROOM <= free:
        return Choice("whole", f"golden: the whole {name} copy ({sizes}: it fits {HEADROOM:g}x over and runs at "
                               "the cost of its arithmetic; --golden streamed streams it)")
    return Choice("streamed", f"golden: streamed, one block at a time ({sizes}: not {HEADROOM:g}x over; "
                              "--golden whole forces the copy)")
