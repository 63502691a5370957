"""Reverse all-to-all with local reorder (the Triton-distributed Ascend tutorial), chunked over S.

Per rank r: input A_r (S*W, H, D) -> output C (S, H*W, D) with C[s, j*H + h] = A_j[r*S + s, h].
Chunk c of S is exchanged with all_to_all_single while the previous chunk is reordered into place.
The identity-compute mode returns the raw all_to_all_single layout (W*S, H, D): block j = A_j[r*S:(r+1)*S].
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from fusecheck.distributed import DistSpec, chunk_bounds, workspace


class ReverseAllToAllReorder(DistSpec):
    collective = "all_to_all_single"
    tiling = {"chunks": 2}
    shapes = [{"s": 4, "h": 3, "d": 4}, {"s": 5, "h": 2, "d": 3}, {"s": 1, "h": 4, "d": 2}]

    def make_inputs(self, shape, rank, world, seed, dtype):
        g = torch.Generator().manual_seed(1000 * seed + rank + 1)
        return {"a": torch.randn((shape["s"] * world, shape["h"], shape["d"]), generator=g).to(dtype), "world": world}

    def comm_input(self, inputs):
        return inputs["a"]

    def _src_rows(self, j: int, S: int, s: int, e: int) -> slice:
        return slice(j * S + s, j * S + e)

    def _pipeline(self, a: torch.Tensor, group, place) -> None:
        world = dist.get_world_size(group)
        S = a.shape[0] // world
        bounds = chunk_bounds(S, int(self.tiling["chunks"]))
        works, recvs = [], []

        def start(c):
            s, e = bounds[c]
            send = workspace.buffer(f"a2a.send{c}", (world * (e - s), *a.shape[1:]), a.dtype, a.device)
            for j in range(world):
                send[j * (e - s):(j + 1) * (e - s)] = a[self._src_rows(j, S, s, e)]
            recvs.append(workspace.buffer(f"a2a.recv{c}", send.shape, a.dtype, a.device))
            works.append(dist.all_to_all_single(recvs[c], send, group=group, async_op=True))

        if bounds:
            start(0)
        for c, (s, e) in enumerate(bounds):
            if c + 1 < len(bounds):
                start(c + 1)
            works[c].wait()
            place(s, e, recvs[c].view(world, e - s, *a.shape[1:]))

    def _reorder(self, out: torch.Tensor, s: int, e: int, blocks: torch.Tensor) -> None:
        H = blocks.shape[2]
        for j in range(blocks.shape[0]):
            out[s:e, j * H:(j + 1) * H] = blocks[j]

    def fused(self, inputs, group):
        a, world = inputs["a"], dist.get_world_size(group)
        out = torch.empty((a.shape[0] // world, a.shape[1] * world, a.shape[2]), dtype=a.dtype, device=a.device)
        self._pipeline(a, group, lambda s, e, blocks: self._reorder(out, s, e, blocks))
        return out

    def comm_only(self, x, group):
        world = dist.get_world_size(group)
        S = x.shape[0] // world
        out = torch.empty_like(x)

        def place(s, e, blocks):
            for j in range(world):
                out[j * S + s:j * S + e] = blocks[j]
        self._pipeline(x, group, place)
        return out

    def compute_only(self, delivered, inputs):
        W, H, D = inputs["world"], delivered.shape[1], delivered.shape[2]
        S = delivered.shape[0] // W
        out = torch.empty((S, H * W, D), dtype=delivered.dtype, device=delivered.device)
        blocks = delivered.view(W, S, H, D)
        for s, e in chunk_bounds(S, int(self.tiling["chunks"])):
            self._reorder(out, s, e, blocks[:, s:e])
        return out

    def compute_golden(self, delivered, inputs):
        W = inputs["world"]
        S = delivered.shape[0] // W
        return delivered.view(W, S, *delivered.shape[1:]).transpose(0, 1).reshape(S, -1, delivered.shape[2])

    def golden(self, inputs, group):
        """The tutorial's golden: cat(chunk(A, W, 0), 1) -> transpose -> all_to_all_single -> transpose back."""
        a, world = inputs["a"], dist.get_world_size(group)
        x = torch.cat(torch.chunk(a, world, 0), 1).transpose(0, 1).contiguous()   # (W*H, S, D)
        y = torch.empty_like(x)
        dist.all_to_all_single(y, x, group=group)
        return y.transpose(0, 1).contiguous()                                     # (S, W*H, D)
