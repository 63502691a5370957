"""Race hunting: random delays injected around torch.distributed calls while a kernel runs.

Measured here (docs/benchmarks.md): one fixed placement for every call on every rank *lowers* some races'
rates, because a delay on the rank that owns a race gives its in-flight operation time to finish (a sleep
before each isend lets the previous one drain the send workspace). So each stressed run picks one
straggler rank, and only the straggler's calls are delayed, each call drawing its own placement (before the
call, after its wait, both) and magnitude (log-uniform up to --max-delay-ms), or no delay at all. A slow peer keeps
the other ranks' operations in flight longer (reuse races) and delivers late (read-before-wait). Even so a
delay can close a race's window (a straggler that issues the next gather late protects its peers' buffers),
so the stressed run is added to each repeat's plain run, never substituted for it (task.py).
The kernel is not modified: the dist functions it calls are wrapped for the duration of the call. Kernels
that bound a collective at import time (`from torch.distributed import all_reduce`) are not reached.
"""
from __future__ import annotations

import contextlib
import functools
import random
import time
import zlib
from dataclasses import dataclass

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

# collectives and point-to-point calls that get delays; absent names (older torch) are skipped
WRAPPED = ("all_gather_single", "reduce_scatter_single", "all_gather_into_tensor", "all_gather", "reduce_scatter_tensor", "reduce_scatter", "all_reduce",
           "all_to_all_single", "all_to_all", "broadcast", "isend", "irecv", "send", "recv", "batch_isend_irecv")

# placement -> (sleep before the call, sleep after the wait); drawn per call, with "none" (no delay)
PLACEMENTS: dict[str, tuple[bool, bool]] = {
    "none": (False, False),
    "before_call": (True, False),
    "after_wait": (False, True),
    "both": (True, True),
}
DECADES = 3    # delays are log-uniform over [max / 10**DECADES, max]


@dataclass(frozen=True)
class StressConfig:
    max_delay_ms: float = 20.0
    seed: int = 0
    run: int = 0
    straggler: int | None = None    # the only rank whose calls are delayed in this run; None: none is
    # every rank pauses this long after each dist call returns: an async operation then completes before the
    # kernel reads its buffer, so a read-before-wait that always loses at full speed wins (layers.py replays)
    settle_ms: float = 0.0

    @staticmethod
    def for_run(index: int, max_delay_ms: float, seed: int, world: int) -> "StressConfig":
        """Run `index`'s straggler, drawn among the ranks; every rank draws the same one."""
        pick = random.Random(stable_seed(seed, index, "straggler")).randrange(world)
        return StressConfig(max_delay_ms, seed, index, pick)

    @property
    def label(self) -> str:
        return "no delays" if self.straggler is None else f"straggler rank {self.straggler}"


class _DelayedWork:
    """Proxy for an async Work whose wait() sleeps afterwards."""

    def __init__(self, work, sleep):
        self._work, self._sleep = work, sleep

    def wait(self, *args, **kwargs):
        out = self._work.wait(*args, **kwargs)
        self._sleep()
        return out

    def __getattr__(self, name):
        return getattr(self._work, name)


def stable_seed(*parts) -> int:
    """A seed from `parts` that is the same in every process and every run (Python's hash() of a str is
    randomized per interpreter, so a failing --stress run would not replay with the same --seed)."""
    return zlib.crc32(repr(parts).encode())


@contextlib.contextmanager
def injected_delays(cfg: StressConfig | None, rank: int, on_call=None):
    """Wrap dist calls for the duration of the block: random delays on the run's straggler when `cfg` is given,
    and `on_call(name)` before each call (the pool counts calls to tell a hung rank from its waiting peers).

    Each function gets one wrapper, set under every module name it has (`torch.distributed.isend` and
    `torch.distributed.distributed_c10d.isend` are the same function, and torch checks a `P2POp`'s op by
    identity against the latter). Calls made from inside a wrapped call (`batch_isend_irecv` calling `isend`)
    are neither counted nor delayed again."""
    if cfg is None and on_call is None:
        yield
        return
    rng = random.Random(stable_seed(cfg.seed, cfg.run, rank) if cfg else 0)
    delayed_rank = cfg is not None and cfg.straggler == rank and cfg.max_delay_ms > 0
    names = list(PLACEMENTS)
    depth = [0]

    def draw() -> tuple[bool, bool, float]:
        """This call's (sleep before, sleep after, seconds): placement, magnitude and zero drawn per call."""
        if not delayed_rank:
            return False, False, 0.0
        before, after = PLACEMENTS[rng.choice(names)]
        return before, after, cfg.max_delay_ms * 10 ** (-DECADES * rng.random()) / 1000

    def wrap(fn, name):
        @functools.wraps(fn)
        def delayed(*args, **kwargs):
            if depth[0]:
                return fn(*args, **kwargs)
            if on_call is not None:
                on_call(name)
            before, after, seconds = draw()
            if before:
                time.sleep(seconds)
            depth[0] += 1
            try:
                out = fn(*args, **kwargs)
            finally:
                depth[0] -= 1
            if cfg is not None and cfg.settle_ms > 0:
                time.sleep(cfg.settle_ms / 1000)
            if after:
                def sleep():
                    time.sleep(seconds)
                if isinstance(out, list):  # batch_isend_irecv
                    return [_DelayedWork(w, sleep) for w in out]
                if out is not None and hasattr(out, "wait"):
                    return _DelayedWork(out, sleep)
                sleep()
            return out
        return delayed

    wrappers: dict[int, tuple] = {}     # id(original) -> (original, wrapper)
    saved = []
    for module in (dist, c10d):
        for name in WRAPPED:
            fn = getattr(module, name, None)
            if fn is None:
                continue
            if id(fn) not in wrappers:
                wrappers[id(fn)] = (fn, wrap(fn, name))
            saved.append((module, name, fn))
            setattr(module, name, wrappers[id(fn)][1])
    batch = wrappers.get(id(getattr(c10d, "batch_isend_irecv", None)))
    if batch is not None:
        # P2POps built before the block hold the original isend/irecv, which batch_isend_irecv would no longer
        # recognise (it tests `op.op is isend`): point them at the wrappers for the duration of the call
        to_wrapper = {id(orig): w for orig, w in wrappers.values()}
        orig_batch, batch_wrapper = batch

        def batch_isend_irecv(p2p_op_list, *args, **kwargs):
            swapped = []
            for op in p2p_op_list:
                w = to_wrapper.get(id(getattr(op, "op", None)))
                if w is not None:
                    swapped.append((op, op.op))
                    op.op = w
            try:
                return batch_wrapper(p2p_op_list, *args, **kwargs)
            finally:
                for op, fn in swapped:
                    op.op = fn
        functools.update_wrapper(batch_isend_irecv, orig_batch)
        for module, name, fn in saved:
            if fn is orig_batch:
                setattr(module, name, batch_isend_irecv)
    try:
        yield
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
