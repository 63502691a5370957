"""Registry of process-group backends: which device each rank uses, how ranks are started, and whether the
backend can run here (with a clear reason when it cannot)."""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run on this machine; the message says why and what would fix it."""


@dataclass(frozen=True)
class Backend:
    name: str
    device_type: str
    start_method: str                                  # how the pool starts ranks (fork is only safe without a device runtime)
    unavailable: Callable[[int], str | None]           # world size -> reason it cannot run, or None
    prepare: Callable[[int], None] = lambda local_rank: None   # per-rank device setup
    timeout_raises: bool = False      # a collective timeout raises in the waiting rank (gloo) instead of aborting it

    def device(self, local_rank: int) -> torch.device:
        return torch.device("cpu") if self.device_type == "cpu" else torch.device(self.device_type, local_rank)


def gloo_rank_limit() -> int:
    """gloo ranks are processes on this host's CPUs: beyond a few per core they only wait for each other, and a
    check that could not finish in its timeout would be reported as a HANG of a correct kernel."""
    return max(8, 4 * (os.cpu_count() or 1))


def _gloo_unavailable(world: int) -> str | None:
    if not (dist.is_available() and dist.is_gloo_available()):
        return "this torch build has no gloo"
    if world > gloo_rank_limit():
        return (f"gloo with {world} ranks on {os.cpu_count()} CPU core(s): more than {gloo_rank_limit()} ranks "
                "(4 per core, at least 8) would time out waiting for each other; use fewer ranks or devices")
    return None


def _nccl_unavailable(world: int) -> str | None:
    if not torch.cuda.is_available():
        return "nccl needs CUDA devices; none are visible (torch.cuda.is_available() is False)"
    if not dist.is_nccl_available():
        return "this torch build has no NCCL"
    if torch.cuda.device_count() < world:
        return f"nccl with {world} ranks needs {world} GPUs on this host; {torch.cuda.device_count()} visible"
    return None


def _hccl_unavailable(world: int) -> str | None:
    try:
        importlib.import_module("torch_npu")
    except Exception as exc:  # ImportError, or libhccl.so missing without CANN
        return (f"hccl needs torch_npu and the CANN toolkit (pip install torch-npu matching torch, source CANN's "
                f"set_env.sh): import torch_npu failed: {exc}")
    npu = getattr(torch, "npu", None)
    if npu is None or not npu.is_available():
        return "torch_npu imported but no NPU is visible"
    if npu.device_count() < world:
        return f"hccl with {world} ranks needs {world} NPUs; {npu.device_count()} visible"
    return None


def _cuda_prepare(local_rank: int) -> None:
    torch.cuda.set_device(local_rank)


def _npu_prepare(local_rank: int) -> None:
    importlib.import_module("torch_npu")
    torch.npu.set_device(local_rank)


BACKENDS: dict[str, Backend] = {
    "gloo": Backend("gloo", "cpu", "fork", _gloo_unavailable, timeout_raises=True),
    "nccl": Backend("nccl", "cuda", "spawn", _nccl_unavailable, _cuda_prepare),
    "hccl": Backend("hccl", "npu", "spawn", _hccl_unavailable, _npu_prepare),
}


def select_backend(name: str | None, world: int) -> Backend:
    """`name` or, for "auto"/None, the backend of the device present: NPU -> hccl, CUDA -> nccl, else gloo."""
    if name in (None, "auto"):
        for candidate in ("hccl", "nccl"):
            if BACKENDS[candidate].unavailable(world) is None:
                return BACKENDS[candidate]
        name = "gloo"
    if name not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    reason = BACKENDS[name].unavailable(world)
    if reason:
        raise BackendUnavailable(reason)
    return BACKENDS[name]
