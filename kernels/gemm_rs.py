"""GEMM + reduce-scatter, chunked: the partial product of chunk c+1 is computed while chunk c is reduced.

Per rank: a (M, k) and b (k, n) with the K dimension sharded over ranks. Output (M/world, n) =
reduce_scatter(a @ b): rank r holds rows r*M/W..(r+1)*M/W of the sum of all ranks' partial products.
Chunk c of every destination's rows is packed into one send buffer (world, rows_c, n).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from fusecheck.distributed import DistSpec, chunk_bounds, seeded_randn, ops, workspace



class GemmReduceScatter(DistSpec):
    collective = "reduce_scatter"
    tiling = {"chunks": 2}
    # rows per rank (m) 5 and 3 do not divide the 2 chunks
    shapes = [{"m": 4, "k": 8, "n": 6}, {"m": 5, "k": 6, "n": 4}, {"m": 3, "k": 3, "n": 5}]

    def make_inputs(self, shape, rank, world, seed, dtype):
        return {"a": seeded_randn((shape["m"] * world, shape["k"]), 1000 * seed + rank + 1, dtype),
                "b": seeded_randn((shape["k"], shape["n"]), 1000 * seed + 500 + rank, dtype)}

    def comm_input(self, inputs):
        return inputs["a"] @ inputs["b"]

    def _matmul(self, x, b):
        return x @ b

    def _run(self, rows_of, m_total: int, n: int, dtype, device, group) -> torch.Tensor:
        """`rows_of(lo, hi)` produces the (hi-lo, n) partial rows; packs, reduce-scatters and unpacks them."""
        world = dist.get_world_size(group)
        m = m_total // world
        bounds = chunk_bounds(m, int(self.tiling["chunks"]))
        out = torch.empty((m, n), dtype=dtype, device=device)
        works, recv = [], []

        def start(c):
            s, e = bounds[c]
            send = workspace.buffer(f"gemm_rs.send{c}", (world * (e - s), n), dtype, device)
            for dst in range(world):
                send[dst * (e - s):(dst + 1) * (e - s)] = rows_of(dst * m + s, dst * m + e)
            recv.append(workspace.buffer(f"gemm_rs.recv{c}", (e - s, n), dtype, device))
            works.append(ops.reduce_scatter_tensor(recv[c], send, group=group, async_op=True))

        if bounds:
            start(0)
        for c, (s, e) in enumerate(bounds):
            if c + 1 < len(bounds):
                start(c + 1)       # compute the next partial while this chunk is being reduced
            works[c].wait()
            out[s:e] = recv[c]
        return out

    def fused(self, inputs, group):
        a, b = inputs["a"], inputs["b"]
        return self._run(lambda lo, hi: self._matmul(a[lo:hi], b), a.shape[0], b.shape[1], a.dtype, a.device, group)

    def comm_only(self, x, group):
        return self._run(lambda lo, hi: x[lo:hi], x.shape[0], x.shape[1], x.dtype, x.device, group)

    def compute_only(self, delivered, inputs):
        """Compute precedes the collective here: the local partial product, chunked like the fused run."""
        a, b = inputs["a"], inputs["b"]
        world = a.shape[0] // delivered.shape[0]
        m = a.shape[0] // world
        out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
        for s, e in chunk_bounds(m, int(self.tiling["chunks"])):
            for dst in range(world):
                out[dst * m + s:dst * m + e] = self._matmul(a[dst * m + s:dst * m + e], b)
        return out

    def compute_golden(self, delivered, inputs):
        return inputs["a"] @ inputs["b"]

    def golden(self, inputs, group):
        partial = inputs["a"] @ inputs["b"]
        out = torch.empty((partial.shape[0] // dist.get_world_size(group), partial.shape[1]),
                          dtype=partial.dtype, device=partial.device)
        ops.reduce_scatter_tensor(out, partial.contiguous(), group=group)
        return out
