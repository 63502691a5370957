"""All-gather + GEMM, chunked: the all-gather of row chunk c+1 is in flight while chunk c is multiplied.

Per rank: a (m, k) row shard, b (k, n) replicated. Output (world*m, n) = all_gather(a) @ b.
The pipeline body is shared by the three modes (fused, identity compute, identity communication), so the
layers test the same chunking. The hooks `_recv_buffers`, `_dest_block`, `_dest_rows`, `_matmul` and
`wait_before_use` are
where the planted bugs of tests/planted/dist_bugs.py go.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from fusecheck.distributed import DistSpec, chunk_bounds, seeded_randn, ops, workspace


class AllGatherGemm(DistSpec):
    collective = "all_gather"
    tiling = {"chunks": 3}
    shapes = [{"m": 8, "k": 16, "n": 8}, {"m": 7, "k": 12, "n": 5}, {"m": 2, "k": 5, "n": 3}]
    wait_before_use = True

    def make_inputs(self, shape, rank, world, seed, dtype):
        return {"a": seeded_randn((shape["m"], shape["k"]), 1000 * seed + rank + 1, dtype),
                "b": seeded_randn((shape["k"], shape["n"]), 1000 * seed, dtype)}

    def comm_input(self, inputs):
        return inputs["a"]

    # ---- the pipeline --------------------------------------------------------------------------------
    def _pipeline(self, a: torch.Tensor, group, consume) -> None:
        """Start the gather of chunk 0; then for each chunk: start the next gather, wait, consume."""
        world = dist.get_world_size(group)
        bounds = chunk_bounds(a.shape[0], int(self.tiling["chunks"]))
        bufs = self._recv_buffers(a, bounds, world)

        def start(c):
            s, e = bounds[c]
            return ops.all_gather_tensor(bufs[c], a[s:e].contiguous(), group=group, async_op=True)

        works = [start(0)] if bounds else []
        for c, (s, e) in enumerate(bounds):
            if c + 1 < len(bounds):
                works.append(start(c + 1))
            if self.wait_before_use:
                works[c].wait()
            consume(c, s, e, bufs[c].view(world, e - s, -1))
        if not self.wait_before_use:
            for w in works:
                w.wait()

    def _recv_buffers(self, a: torch.Tensor, bounds: list, world: int) -> list[torch.Tensor]:
        """One receive buffer per chunk: chunk c+1 is gathered while chunk c is still being consumed."""
        return [workspace.buffer(f"ag_gemm.recv{c}", (world * (e - s), a.shape[1]), a.dtype, a.device)
                for c, (s, e) in enumerate(bounds)]

    def _dest_block(self, src: int, world: int) -> int:
        return src

    def _dest_rows(self, src: int, m: int, s: int, e: int) -> slice:
        return slice(src * m + s, src * m + e)

    def _matmul(self, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return x @ b

    def _run(self, a, group, tile) -> torch.Tensor:
        world, m = dist.get_world_size(group), a.shape[0]
        out = None

        def consume(c, s, e, gathered):
            nonlocal out
            for src in range(world):
                y = tile(gathered[src])
                if out is None:
                    out = torch.empty((world * m, y.shape[1]), dtype=y.dtype, device=y.device)
                out[self._dest_rows(self._dest_block(src, world), m, s, e)] = y
        self._pipeline(a, group, consume)
        return out

    # ---- the three modes -------------------------------------------------------------------------------
    def fused(self, inputs, group):
        return self._run(inputs["a"], group, lambda x: self._matmul(x, inputs["b"]))

    def comm_only(self, x, group):
        return self._run(x, group, lambda t: t)

    def compute_only(self, delivered, inputs):
        world, m = delivered.shape[0] // inputs["a"].shape[0], inputs["a"].shape[0]
        out = torch.empty((world * m, inputs["b"].shape[1]), dtype=delivered.dtype, device=delivered.device)
        for s, e in chunk_bounds(m, int(self.tiling["chunks"])):
            for src in range(world):
                out[src * m + s:src * m + e] = self._matmul(delivered[src * m + s:src * m + e], inputs["b"])
        return out

    # ---- goldens ---------------------------------------------------------------------------------------
    def compute_golden(self, delivered, inputs):
        return delivered @ inputs["b"]

    def golden(self, inputs, group):
        a = inputs["a"]
        full = torch.empty((dist.get_world_size(group) * a.shape[0], a.shape[1]), dtype=a.dtype, device=a.device)
        ops.all_gather_tensor(full, a.contiguous(), group=group)
        return full @ inputs["b"]
