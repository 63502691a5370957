"""All-reduce + residual add + RMSNorm, chunked over tokens: chunk c+1 is all-reduced while chunk c is
normalised. Per rank: x (T, H) partial sums, residual (T, H) and weight (H,) replicated.
Output y = rmsnorm(all_reduce(x) + residual) * weight, identical on every rank (`outputs_agree`).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from fusecheck.distributed import DistSpec, chunk_bounds, seeded_randn, workspace

EPS = 1e-6



class AllReduceRMSNorm(DistSpec):
    collective = "all_reduce"
    tiling = {"chunks": 3}
    shapes = [{"t": 6, "h": 16}, {"t": 7, "h": 10}, {"t": 2, "h": 33}]
    outputs_agree = True

    def make_inputs(self, shape, rank, world, seed, dtype):
        return {"x": seeded_randn((shape["t"], shape["h"]), 1000 * seed + rank + 1, dtype),
                "residual": seeded_randn((shape["t"], shape["h"]), 1000 * seed, dtype),
                "weight": 1 + 0.1 * seeded_randn((shape["h"],), 1000 * seed + 999, dtype)}

    def comm_input(self, inputs):
        return inputs["x"]

    def _pipeline(self, x, group, consume) -> None:
        bounds = chunk_bounds(x.shape[0], int(self.tiling["chunks"]))
        bufs = [workspace.buffer(f"ar_rmsnorm.buf{c}", (e - s, x.shape[1]), x.dtype, x.device)
                for c, (s, e) in enumerate(bounds)]

        def start(c):
            s, e = bounds[c]
            bufs[c].copy_(x[s:e])
            return dist.all_reduce(bufs[c], group=group, async_op=True)

        works = [start(0)] if bounds else []
        for c, (s, e) in enumerate(bounds):
            if c + 1 < len(bounds):
                works.append(start(c + 1))
            works[c].wait()
            consume(s, e, bufs[c])

    def _norm(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm computed in fp32 (or wider), rounded once to the op dtype."""
        acc = torch.promote_types(h.dtype, torch.float32)
        h32 = h.to(acc)
        var = h32.pow(2).mean(-1, keepdim=True)
        return (h32 * torch.rsqrt(var + EPS) * weight.to(acc)).to(h.dtype)

    def fused(self, inputs, group):
        out = torch.empty_like(inputs["x"])

        def consume(s, e, reduced):
            out[s:e] = self._norm(reduced + inputs["residual"][s:e], inputs["weight"])
        self._pipeline(inputs["x"], group, consume)
        return out

    def comm_only(self, x, group):
        out = torch.empty_like(x)

        def consume(s, e, reduced):
            out[s:e] = reduced
        self._pipeline(x, group, consume)
        return out

    def compute_only(self, delivered, inputs):
        out = torch.empty_like(delivered)
        for s, e in chunk_bounds(delivered.shape[0], int(self.tiling["chunks"])):
            out[s:e] = self._norm(delivered[s:e] + inputs["residual"][s:e], inputs["weight"])
        return out

    def compute_golden(self, delivered, inputs):
        h = delivered + inputs["residual"]
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * inputs["weight"]

    def golden(self, inputs, group):
        x = inputs["x"].clone()
        dist.all_reduce(x, group=group)
        return self.compute_golden(x, inputs)
