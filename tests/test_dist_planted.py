"""Planted bugs for the `fusecheck dist` tests (no tests here): each subclass breaks one thing in a correct
reference kernel, the way real kernels break. Loaded by path inside the rank processes."""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, cls: str):
    spec = importlib.util.spec_from_file_location(f"fusecheck_planted_{name}", ROOT / "kernels" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, cls)


AllGatherGemm = _load("ag_gemm", "AllGatherGemm")


class WrongRankOrder(AllGatherGemm):
    """Rank src's gathered block is written where rank src+1's belongs."""

    def _dest_block(self, src, world):
        return (src + 1) % world


class ChunkOffsetOffByOne(AllGatherGemm):
    """Every chunk after the first lands one row early: overwrites the previous chunk's last row and leaves
    its own last row unwritten."""

    def _dest_rows(self, src, m, s, e):
        shift = 1 if s else 0
        return slice(src * m + s - shift, src * m + e - shift)


class MissingWait(AllGatherGemm):
    """Consumes each gathered chunk without waiting for its all-gather (waits only at the end)."""

    wait_before_use = False


class Bf16Accumulation(AllGatherGemm):
    """Accumulates the GEMM over K in bfloat16, one rank-1 update at a time."""

    def _matmul(self, x, b):
        acc = torch.zeros((x.shape[0], b.shape[1]), dtype=torch.bfloat16, device=x.device)
        for k in range(x.shape[1]):
            acc = acc + (x[:, k:k + 1].float() * b[k:k + 1].float()).to(torch.bfloat16)
        return acc.to(x.dtype)


class DataDependentCompute(AllGatherGemm):
    """Wrong only when a chunk's first element is negative (e.g. a sign-dependent fast path): the whole kernel
    fails for some seeds and passes for others, which must not be mistaken for a race."""

    def _matmul(self, x, b):
        y = x @ b
        return -y if x.numel() and x.reshape(-1)[0] < 0 else y


class DropsNaN(AllGatherGemm):
    """Treats NaN inputs as zero (a masked load with `other=0` that also masks NaN)."""

    def _matmul(self, x, b):
        return torch.nan_to_num(x, nan=0.0, posinf=float("inf"), neginf=float("-inf")) @ b


class WrongDtype(AllGatherGemm):
    """Returns its output upcast to float64 (an accumulator returned without the final cast)."""

    def fused(self, inputs, group):
        return super().fused(inputs, group).double()


class WrongShape(AllGatherGemm):
    """Returns its output flattened (the kernel's flat output buffer, never viewed back to rows x cols)."""

    def fused(self, inputs, group):
        return super().fused(inputs, group).reshape(-1)


class WrongDtypeOnRank(AllGatherGemm):
    """Only one rank returns the wrong dtype: rank-dependent, but still an output-contract bug, not layout."""

    def fused(self, inputs, group):
        out = super().fused(inputs, group)
        return out.double() if dist.get_rank(group) == 1 else out


class HangsOnRank(AllGatherGemm):
    """One rank never returns from the fused call."""

    def __init__(self, rank: int = 1):
        self.bad_rank = rank

    def fused(self, inputs, group):
        if dist.get_rank(group) == self.bad_rank:
            time.sleep(3600)
        return super().fused(inputs, group)


class CrashesOnRank(AllGatherGemm):
    """One rank raises inside the fused call."""

    def __init__(self, rank: int = 1):
        self.bad_rank = rank

    def fused(self, inputs, group):
        if dist.get_rank(group) == self.bad_rank:
            raise RuntimeError(f"planted crash on rank {self.bad_rank}")
        return super().fused(inputs, group)


class SharedRecvBuffer(AllGatherGemm):
    """Gathers every chunk into one receive buffer: the gather of chunk c+1 (started early, for overlap) can
    overwrite chunk c before it is consumed. Wrong only when c+1's gather finishes first: a timing race."""

    def _pipeline(self, a, group, consume):
        from fusecheck.dist import chunk_bounds, ops, workspace
        world = dist.get_world_size(group)
        bounds = chunk_bounds(a.shape[0], int(self.tiling["chunks"]))
        rows = max((e - s for s, e in bounds), default=0)
        shared = workspace.buffer("ag_gemm.shared", (world * rows, a.shape[1]), a.dtype, a.device)
        views = [shared[:world * (e - s)] for s, e in bounds]

        def start(c):
            s, e = bounds[c]
            return ops.all_gather_tensor(views[c], a[s:e].contiguous(), group=group, async_op=True)

        works = [start(0)] if bounds else []
        for c, (s, e) in enumerate(bounds):
            if c + 1 < len(bounds):
                works.append(start(c + 1))
            works[c].wait()
            consume(c, s, e, views[c].view(world, e - s, -1))


class DiesOnRank(AllGatherGemm):
    """One rank's process is killed outright (no Python traceback), as a segfault or OOM kill would."""

    def __init__(self, rank: int = 1):
        self.bad_rank = rank

    def fused(self, inputs, group):
        if dist.get_rank(group) == self.bad_rank:
            import os
            import signal
            os.kill(os.getpid(), signal.SIGKILL)
        return super().fused(inputs, group)


class UnseededInputs(AllGatherGemm):
    """Breaks the spec contract: inputs drawn from the global RNG, not from (shape, rank, world, seed)."""

    def make_inputs(self, shape, rank, world, seed, dtype):
        return {"a": torch.randn(shape["m"], shape["k"]).to(dtype), "b": torch.ones(shape["k"], shape["n"], dtype=dtype)}
