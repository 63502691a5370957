"""Registry of devices: how to check availability and which dtype the golden runs in there.

NPU is an adapter behind an import guard: without torch_npu it fails with a clear message.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch

from fusecheck import dtypes
from fusecheck.case import TargetError


# tensors that may be copied to another device and back: a subclass (DTensor, a fake tensor) stays where it is
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _npu_available() -> bool:
    try:
        importlib.import_module("torch_npu")
    except ImportError:
        return False
    return bool(getattr(torch, "npu", None) and torch.npu.is_available())


@dataclass(frozen=True)
class Device:
    name: str
    available: Callable[[], bool]
    golden_dtype: torch.dtype
    missing: str


DEVICES: dict[str, Device] = {
    "cpu": Device("cpu", lambda: True, torch.float64, ""),
    "cuda": Device("cuda", torch.cuda.is_available, torch.float64, "CUDA is not available on this machine"),
    "npu": Device("npu", _npu_available, torch.float32,
                  "NPU needs torch_npu and the CANN toolkit (import torch_npu failed or no NPU visible)"),
    "mps": Device("mps", lambda: torch.backends.mps.is_available(), torch.float32, "MPS is not available"),
}


def resolve_device(name: str) -> Device:
    kind = name.split(":")[0]
    if kind not in DEVICES:
        raise TargetError(f"unknown device {name!r}; known: {', '.join(DEVICES)}")
    dev = DEVICES[kind]
    if not dev.available():
        raise TargetError(f"device {name!r}: {dev.missing}")
    return dev


def resolve_dtype(name: str | None) -> torch.dtype | None:
    """A dtype name in the one vocabulary (fusecheck/dtypes.py) -> torch's dtype."""
    if name is None:
        return None
    if dtypes.short_name(name) is None:
        raise TargetError(f"unknown dtype {name!r}; known: {dtypes.known()}")
    return dtypes.torch_dtype(name)
