"""Every rank builds the same model, shards it per block with FSDP2 and compiles it per block.

A target too large for one device builds its parameters on the meta device (models/meta.py); they are
sharded while still on meta, then each rank allocates only its own shard (`to_empty`) and fills it with
seeded random values, so the whole model never exists on one rank and nothing is downloaded.
"""
from __future__ import annotations

import warnings

import torch

from fusecheck.case import TargetError


def init_process_group(device_type: str, timeout_s: float) -> None:
    """gloo on the host, nccl on CUDA; each rank on the device of its LOCAL_RANK."""
    import datetime
    import os

    import torch.distributed as dist
    if device_type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo",
                                timeout=datetime.timedelta(seconds=timeout_s))


def rank_device(device: str) -> torch.device:
    import os
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return dev


def on_meta(model: torch.nn.Module) -> bool:
    return any(p.is_meta for p in model.parameters())


def fully_shard_blocks(model: torch.nn.Module, blocks: list[tuple[str, torch.nn.Module]], device: torch.device):
    """FSDP2: each block is one shard group (all-gathered for its forward, freed after), the rest of the model
    (embeddings, final norm, head) the root's group. Works from torch 2.6 (`torch.distributed.fsdp.fully_shard`)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for _, block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def tensor_parallel_blocks(blocks: list[tuple[str, torch.nn.Module]], plan: dict, device: torch.device) -> None:
    """DTensor tensor parallelism inside each block, as the target's `fusecheck_tp_plan` says ({submodule
    name inside a block: ColwiseParallel() / RowwiseParallel() ...}); the rest of the model is replicated."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for _, block in blocks:
        parallelize_module(block, mesh, plan)


def _init_unclaimed(p: torch.Tensor, name: str) -> None:
    """Parameters of modules without `reset_parameters` (RMSNorm weights, rotary tables learned as
    parameters): norm weights (1-D `...weight`) start at one, other 1-D ones at zero, matrices as
    transformers initialises them (normal, std 0.02)."""
    if p.dim() <= 1:
        p.fill_(1.0 if name.endswith("weight") else 0.0)
    else:
        p.normal_(0.0, 0.02)


def _module_seed(seed: int, index: int, params: list[torch.Tensor], device: torch.device) -> int:
    """Every rank reseeds per module, so replicated parameters are equal on all ranks whatever the shards drew
    before. On a host mesh DTensor draws each shard from the local generator: the rank joins the seed there,
    else every shard would hold the same values and a shard put in the wrong place would go unseen (on CUDA
    DTensor's own RNG tracker gives each shard its part of one random tensor)."""
    import torch.distributed as dist
    sharded = any(hasattr(p, "to_local") for p in params)
    return seed + index + (1_000_003 * dist.get_rank() if sharded and device.type != "cuda" else 0)


def materialize(model: torch.nn.Module, device: torch.device, seed: int) -> None:
    """Allocate every rank's shard on `device` and fill it, identically seeded on every rank: modules'
    own `reset_parameters`, then `_init_unclaimed`. Buffers built on a real device (rotary tables) keep
    their values; a buffer left on meta has no value anyone could give it: refused."""
    lost = [n for n, b in model.named_buffers() if b.is_meta]
    if lost:
        raise TargetError(f"buffer(s) {', '.join(lost[:3])} are on the meta device and would be garbage: build "
                          "only parameters on meta (models/meta.py: parameters_on_meta)")
    kept = {n: b for n, b in model.named_buffers()}
    model.to_empty(device=device)
    for name, b in kept.items():
        owner, _, leaf = name.rpartition(".")
        model.get_submodule(owner)._buffers[leaf] = b.to(device)
    torch.manual_seed(seed)
    claimed: set[int] = set()
    with torch.no_grad(), warnings.catch_warnings():
        # on a host mesh each rank draws its shard from the same seed: values differ from an unsharded init,
        # which no check depends on (eager, compiled and golden all use these weights)
        warnings.filterwarnings("ignore", message="DTensor random operators")
        for i, m in enumerate(model.modules()):
            own = [p for p in m._parameters.values() if p is not None]
            if own and callable(getattr(m, "reset_parameters", None)):
                torch.manual_seed(_module_seed(seed, i, own, device))
                m.reset_parameters()
                claimed.update(id(p) for p in own)
        for name, p in model.named_parameters():
            if id(p) not in claimed:
                _init_unclaimed(p, name)


def compile_blocks(blocks: list[tuple[str, torch.nn.Module]], backend) -> None:
    """Regional compilation of each block's `forward`: FSDP's all-gather hooks stay around it, in eager, as
    FSDP2 users compile (dynamo no longer skips FSDP hooks by itself in recent torch)."""
    for _, block in blocks:
        block.forward = torch.compile(block.forward, backend=backend)


def enough_recompiles(n_blocks: int):
    """Blocks share one code object: should dynamo guard per block instance, the default recompile limit (8)
    would silently leave the later blocks of an 80-layer model eager. Allow one entry per block."""
    name = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    return torch._dynamo.config.patch(**{name: max(getattr(torch._dynamo.config, name), n_blocks + 8)})


def uncompile_blocks(blocks: list[tuple[str, torch.nn.Module]]) -> None:
    for _, block in blocks:
        block.__dict__.pop("forward", None)
