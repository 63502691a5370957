"""Planted bugs for the `fusecheck dist` tests (no tests here): each subclass breaks one thing in a correct
reference kernel, the way real kernels break. Loaded by path inside the rank processes."""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[2]


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


class DataDependentFusedOnly(AllGatherGemm):
    """The fused path's tile negates its product when the tile's first element is negative; compute_only takes
    the correct path. Wrong on some seeds and right on others, with the same bits on every replay of the same
    inputs: a data-dependent bug, never a race."""

    def fused(self, inputs, group):
        def tile(x):
            y = x @ inputs["b"]
            return -y if x.numel() and x.reshape(-1)[0] < 0 else y
        return self._run(inputs["a"], group, tile)


class GoldenReturnsList(AllGatherGemm):
    """A spec mistake: golden() returns [tensor]. The kernel is right; the spec's reference is what is broken."""

    def golden(self, inputs, group):
        return [super().golden(inputs, group)]


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

    def _recv_buffers(self, a, bounds, world):
        from fusecheck.distributed import workspace
        rows = max((e - s for s, e in bounds), default=0)
        shared = workspace.buffer("ag_gemm.shared", (world * rows, a.shape[1]), a.dtype, a.device)
        return [shared[:world * (e - s)] for s, e in bounds]


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


# ---- from the review of `fusecheck dist` (each one broke the tool, not only the kernel) ----------------------

from fusecheck.distributed import DistSpec, seeded_randn  # noqa: E402


class RingAllGatherP2P(DistSpec):
    """A correct all_gather built as a ring of `dist.P2POp(dist.isend/irecv)` + `batch_isend_irecv`, or of
    plain isend/irecv (`batch=0`); compute = x * 2. The stress wrappers once made torch reject the P2POps."""

    collective = "all_gather"
    tiling = {"chunks": 1}
    shapes = [{"m": 4, "k": 3}]

    def __init__(self, batch: int = 1):
        self.batch = bool(batch)

    def make_inputs(self, shape, rank, world, seed, dtype):
        return {"a": seeded_randn((shape["m"], shape["k"]), 1000 * seed + rank + 1, dtype)}

    def comm_input(self, inputs):
        return inputs["a"]

    def _peer(self, group, group_rank: int) -> int:
        """isend/irecv/P2POp take a *global* rank whatever the group: a group rank is right only on the
        default group."""
        return dist.get_global_rank(group, group_rank)

    def _gather(self, x, group):
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        out = [torch.empty_like(x) for _ in range(world)]
        out[rank] = x.clone()
        nxt, prev = self._peer(group, (rank + 1) % world), self._peer(group, (rank - 1) % world)
        for step in range(world - 1):
            send_i, recv_i = (rank - step) % world, (rank - step - 1) % world
            if self.batch:
                works = dist.batch_isend_irecv([dist.P2POp(dist.isend, out[send_i], nxt, group),
                                                dist.P2POp(dist.irecv, out[recv_i], prev, group)])
            else:
                works = [dist.isend(out[send_i], nxt, group), dist.irecv(out[recv_i], prev, group)]
            for w in works:
                w.wait()
        return torch.cat(out, 0)

    def fused(self, inputs, group):
        return self._gather(inputs["a"], group) * 2

    def comm_only(self, x, group):
        return self._gather(x, group)

    def compute_only(self, delivered, inputs):
        return delivered * 2

    def compute_golden(self, delivered, inputs):
        return delivered * 2

    def golden(self, inputs, group):
        a = inputs["a"]
        out = [torch.empty_like(a) for _ in range(dist.get_world_size(group))]
        dist.all_gather(out, a, group=group)
        return torch.cat(out, 0) * 2


class GroupRankAsPeer(RingAllGatherP2P):
    """The ring passes its neighbours' *group* ranks to isend/irecv, which take global ranks: right on the
    default group, wrong on any other (a tensor-parallel group of a larger job)."""

    def _peer(self, group, group_rank):
        return group_rank


class GlobalRankSlot(AllGatherGemm):
    """Writes its own block's product straight into the output slot of `dist.get_rank()` (the global rank)
    instead of `dist.get_rank(group)`: right on the default group, a misplaced block on any other."""

    def fused(self, inputs, group):
        out = super().fused(inputs, group)
        world, m = dist.get_world_size(group), inputs["a"].shape[0]
        me = dist.get_rank() % world
        out[me * m:(me + 1) * m] = inputs["a"] @ inputs["b"]
        return out


class StagingOffByOne(AllGatherGemm):
    """Deterministic layout bug: gathers into staging[1:] and reads staging[:-1] (one element early), so
    element 0 of the staging workspace is never written. No timing involved: must not look like a race."""

    def _pipeline(self, a, group, consume):
        from fusecheck.distributed import chunk_bounds, ops, workspace
        world = dist.get_world_size(group)
        for c, (s, e) in enumerate(chunk_bounds(a.shape[0], int(self.tiling["chunks"]))):
            n = world * (e - s) * a.shape[1]
            buf = workspace.buffer(f"stage{c}", (n + 1,), a.dtype, a.device)
            ops.all_gather_tensor(buf[1:], a[s:e].contiguous().reshape(-1), group=group)
            consume(c, s, e, buf[:-1].view(world, e - s, -1))


class RaisesOnRank(AllGatherGemm):
    """One rank raises a non-backend exception whose text looks like a peer's side effect."""

    def __init__(self, rank: int = 1, kind: str = "ValueError"):
        self.bad_rank, self.kind = rank, kind

    def fused(self, inputs, group):
        if dist.get_rank(group) == self.bad_rank:
            exc = {"ValueError": ValueError, "TimeoutError": TimeoutError}[self.kind]
            raise exc("tile size does not match peer's tile size (socket timeout)")
        return super().fused(inputs, group)


class DeadlockOnRank(AllGatherGemm):
    """One rank waits for a message nobody sends; the others wait in the all-gather: every rank times out."""

    def __init__(self, rank: int = 1):
        self.bad_rank = rank

    def fused(self, inputs, group):
        if dist.get_rank(group) == self.bad_rank:
            dist.recv(torch.zeros(1), src=(self.bad_rank + 1) % dist.get_world_size(group))
        return super().fused(inputs, group)


class SameInputsMisroutedFused(AllGatherGemm):
    """A spec mistake (make_inputs ignores rank) hiding a kernel bug (fused() writes src's block to slot
    src + 1; comm_only is correct): with identical inputs on every rank the misrouting is invisible."""

    def make_inputs(self, shape, rank, world, seed, dtype):
        return super().make_inputs(shape, 0, world, seed, dtype)

    def fused(self, inputs, group):
        self._dest_block = lambda src, world: (src + 1) % world
        try:
            return super().fused(inputs, group)
        finally:
            del self._dest_block


class Livelock(AllGatherGemm):
    """Polls a flag that is never set with a collective: keeps making dist calls forever."""

    def fused(self, inputs, group):
        flag = torch.zeros(1)
        while flag.item() == 0:
            dist.all_reduce(flag, group=group)
        return super().fused(inputs, group)


# ---- from issue 10 (the layer was wrong at default settings) ------------------------------------------------

AllReduceRMSNorm = _load("ar_rmsnorm", "AllReduceRMSNorm")


class ReadsAllReduceBeforeWait(AllReduceRMSNorm):
    """Normalises each chunk as soon as its all-reduce is issued, waiting only at the end: a race."""

    def _pipeline(self, x, group, consume):
        from fusecheck.distributed import chunk_bounds, workspace
        bounds = chunk_bounds(x.shape[0], int(self.tiling["chunks"]))
        works = []
        for c, (s, e) in enumerate(bounds):
            buf = workspace.buffer(f"ar_rmsnorm.buf{c}", (e - s, x.shape[1]), x.dtype, x.device)
            buf.copy_(x[s:e])
            works.append(dist.all_reduce(buf, group=group, async_op=True))
            consume(s, e, buf)
        for w in works:
            w.wait()


class UpcastAllReduceNotCopiedBack(AllReduceRMSNorm):
    """The low-precision path all-reduces an fp32 copy of each chunk and never copies it back (the fp32 path
    reduces in place): only fp16/bf16 kernels are wrong, so layer 1 must run in the op dtype to see it."""

    def _pipeline(self, x, group, consume):
        from fusecheck.distributed import chunk_bounds, workspace
        for c, (s, e) in enumerate(chunk_bounds(x.shape[0], int(self.tiling["chunks"]))):
            buf = workspace.buffer(f"ar_rmsnorm.buf{c}", (e - s, x.shape[1]), x.dtype, x.device)
            buf.copy_(x[s:e])
            if buf.dtype in (torch.float16, torch.bfloat16):
                dist.all_reduce(buf.float(), group=group)
            else:
                dist.all_reduce(buf, group=group)
            consume(s, e, buf)


class AllReducesThroughBf16(AllReduceRMSNorm):
    """Sends every chunk as bf16 whatever the op dtype (a "bandwidth" shortcut): fp32 data loses 16 significand
    bits in transit. The values still sum right to bf16 precision, so only tags that need the op dtype's
    whole significand show it in layer 1."""

    def _pipeline(self, x, group, consume):
        from fusecheck.distributed import chunk_bounds, workspace
        for c, (s, e) in enumerate(chunk_bounds(x.shape[0], int(self.tiling["chunks"]))):
            buf = workspace.buffer(f"ar_rmsnorm.buf{c}", (e - s, x.shape[1]), x.dtype, x.device)
            wire = x[s:e].to(torch.bfloat16)
            dist.all_reduce(wire, group=group)
            buf.copy_(wire)
            consume(s, e, buf)


class AllReducesClampedAtZero(AllReduceRMSNorm):
    """The send buffer goes through a ReLU-like clamp before the all-reduce (an epilogue fused into the wrong
    side of the communication): negative values never arrive. Non-negative integer tags would pass it."""

    def _pipeline(self, x, group, consume):
        from fusecheck.distributed import chunk_bounds, workspace
        for c, (s, e) in enumerate(chunk_bounds(x.shape[0], int(self.tiling["chunks"]))):
            buf = workspace.buffer(f"ar_rmsnorm.buf{c}", (e - s, x.shape[1]), x.dtype, x.device)
            buf.copy_(x[s:e].clamp(min=0))
            dist.all_reduce(buf, group=group)
            consume(s, e, buf)


class SquaresInHalf(AllReduceRMSNorm):
    """Computes the mean square in the op dtype: in fp16 it overflows once |x| > 256 (inputs of ordinary
    magnitude never show it)."""

    def _norm(self, h, weight):
        var = h.pow(2).mean(-1, keepdim=True)
        return (h.float() * torch.rsqrt(var.float() + 1e-6) * weight.float()).to(h.dtype)


class MissingEpsilon(AllReduceRMSNorm):
    """Leaves out the epsilon: wrong only for rows whose mean square is comparable to it (tiny rows)."""

    def _norm(self, h, weight):
        h32 = h.float()
        return (h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True)) * weight.float()).to(h.dtype)


class SkipsCollectiveOnRank(AllReduceRMSNorm):
    """One rank skips the all-reduce of the last chunk (e.g. a tail condition evaluated per rank)."""

    def __init__(self, rank: int = 1):
        self.bad_rank = rank

    def _pipeline(self, x, group, consume):
        from fusecheck.distributed import chunk_bounds, workspace
        bounds = chunk_bounds(x.shape[0], int(self.tiling["chunks"]))
        for c, (s, e) in enumerate(bounds):
            buf = workspace.buffer(f"ar_rmsnorm.buf{c}", (e - s, x.shape[1]), x.dtype, x.device)
            buf.copy_(x[s:e])
            if not (c == len(bounds) - 1 and dist.get_rank(group) == self.bad_rank):
                dist.all_reduce(buf, group=group)
            consume(s, e, buf)


class P2PAllGather(DistSpec):
    """All-gather built from isend/irecv of row chunks through one persistent send workspace; compute = x * 2.
    `wait_send=0` plants the race: the next chunk is copied into the send workspace before the previous
    chunk's isend finished (the correct kernel waits for the sends before reusing it)."""

    collective = "all_gather"
    tiling = {"chunks": 4}
    shapes = [{"m": 16, "k": 64}]

    def __init__(self, wait_send: bool = True, work_ms: float = 0.0):
        self.wait_send, self.work_ms = wait_send, work_ms

    def make_inputs(self, shape, rank, world, seed, dtype):
        return {"a": seeded_randn((shape["m"], shape["k"]), 1000 * seed + rank + 1, dtype)}

    def comm_input(self, inputs):
        return inputs["a"]

    def _gather(self, x, group):
        from fusecheck.distributed import chunk_bounds, workspace
        world, rank, m = dist.get_world_size(group), dist.get_rank(group), x.shape[0]
        out = torch.empty((world * m, x.shape[1]), dtype=x.dtype, device=x.device)
        out[rank * m:(rank + 1) * m] = x
        bounds = chunk_bounds(m, int(self.tiling["chunks"]))
        send = workspace.buffer("p2p.send", (max(e - s for s, e in bounds), x.shape[1]), x.dtype, x.device)
        recvs, sends = [], []
        for s, e in bounds:
            if self.wait_send:
                for w in sends:
                    w.wait()
                sends = []
            send[:e - s].copy_(x[s:e])
            for peer in range(world):
                if peer != rank:
                    sends.append(dist.isend(send[:e - s], dist.get_global_rank(group, peer), group))
                    recvs.append(dist.irecv(out[peer * m + s:peer * m + e], dist.get_global_rank(group, peer), group))
            time.sleep(self.work_ms / 1000)   # the compute that overlaps the sends (narrows the race window)
        for w in sends + recvs:
            w.wait()
        return out

    def fused(self, inputs, group):
        return self._gather(inputs["a"], group) * 2

    def comm_only(self, x, group):
        return self._gather(x, group)

    def compute_only(self, delivered, inputs):
        return delivered * 2

    def compute_golden(self, delivered, inputs):
        return delivered * 2

    def golden(self, inputs, group):
        a = inputs["a"]
        out = [torch.empty_like(a) for _ in range(dist.get_world_size(group))]
        dist.all_gather(out, a, group=group)
        return torch.cat(out, 0) * 2


# ---- issue 20 part 3: per-shape rates, never-written slots, a layer that fails alone -------------------------

RAGGED_SHAPES = [{"m": 6, "k": 6, "n": 4}, {"m": 7, "k": 6, "n": 4}, {"m": 9, "k": 6, "n": 4}]  # chunks 3


class TailOnlyBug(AllGatherGemm):
    """Deterministic: when the rows do not divide into the chunks, the ragged tail chunk's last output row is
    written twice as large. Fails the non-dividing shape (m=7) every run and never the others."""

    shapes = RAGGED_SHAPES

    def fused(self, inputs, group):
        out = super().fused(inputs, group)
        m, chunks = inputs["a"].shape[0], int(self.tiling["chunks"])
        if m % chunks:
            out[-1] = out[-1] * 2
        return out


class CorrectOnRaggedShapes(AllGatherGemm):
    """The correct kernel on the same shapes as TailOnlyBug."""

    shapes = RAGGED_SHAPES


class OffByOneVaryingPoison(ChunkOffsetOffByOne):
    """The off-by-one chunk offset of ChunkOffsetOffByOne, but the output is allocated filled with a value that
    changes on every call (as uninitialised or recycled memory does): the never-written rows hold different
    garbage in every repeat while the same positions are wrong. Deterministic: layout, never a race."""

    _calls = 0

    def _run(self, a, group, tile):
        world, m = dist.get_world_size(group), a.shape[0]
        out = None

        def consume(c, s, e, gathered):
            nonlocal out
            for src in range(world):
                y = tile(gathered[src])
                if out is None:
                    type(self)._calls += 1
                    out = torch.full((world * m, y.shape[1]), 1000.5 + 17 * type(self)._calls, dtype=y.dtype,
                                     device=y.device)
                out[self._dest_rows(self._dest_block(src, world), m, s, e)] = y
        self._pipeline(a, group, consume)
        return out


class Bf16OnlyRankOrder(AllGatherGemm):
    """A communication bug on the bf16 path only (a dtype-specialised packing that swaps the ranks' blocks):
    fp32 and fp16 are correct; in bf16 only layer 1 (and the whole kernel) fail."""

    def _run(self, a, group, tile):
        self._swap = a.dtype == torch.bfloat16
        return super()._run(a, group, tile)

    def _dest_block(self, src, world):
        return (src + 1) % world if getattr(self, "_swap", False) else src


class NaNOptOutB(AllGatherGemm):
    """The correct kernel whose spec opts `b` out of the NaN/Inf probes."""

    shapes = [{"m": 4, "k": 6, "n": 4}]
    no_nan_inf = ("b",)


class NaNOptOutUnknown(AllGatherGemm):
    shapes = [{"m": 4, "k": 6, "n": 4}]
    no_nan_inf = ("nope",)


class TailOnlyComputeBug(TailOnlyBug):
    """TailOnlyBug in the compute as well (compute_only shares it): layer 2 fails the non-dividing shape only."""

    def compute_only(self, delivered, inputs):
        out = super().compute_only(delivered, inputs)
        if inputs["a"].shape[0] % int(self.tiling["chunks"]):
            out[-1] = out[-1] * 2
        return out
