"""Race hunting: random per-rank delays injected around torch.distributed calls while a kernel runs.

A delay placement that exposes one race can hide another (a sleep before each call makes read-before-wait
likely; a sleep after each wait makes it rarer but exposes workspace reuse), so runs cycle through
several placements. The kernel is not modified: the dist functions it calls are wrapped for the duration.
Kernels that bound a collective at import time (`from torch.distributed import all_reduce`) are not reached.
"""
from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

# collectives and point-to-point calls that get delays; absent names (older torch) are skipped
WRAPPED = ("all_gather_single", "reduce_scatter_single", "all_gather_into_tensor", "all_gather", "reduce_scatter_tensor", "reduce_scatter", "all_reduce",
           "all_to_all_single", "all_to_all", "broadcast", "isend", "irecv", "send", "recv", "batch_isend_irecv")

# placement -> (sleep before the call, sleep after the wait)
PLACEMENTS: dict[str, tuple[bool, bool]] = {
    "before_call": (True, False),
    "after_wait": (False, True),
    "both": (True, True),
}


@dataclass(frozen=True)
class StressConfig:
    max_delay_ms: float = 20.0
    placement: str = "before_call"
    seed: int = 0

    @staticmethod
    def for_run(index: int, max_delay_ms: float, seed: int) -> "StressConfig":
        names = list(PLACEMENTS)
        return StressConfig(max_delay_ms, names[index % len(names)], seed)


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


@contextlib.contextmanager
def injected_delays(cfg: StressConfig | None, rank: int, on_call=None):
    """Wrap dist calls for the duration of the block: random delays (per rank and run) when `cfg` is given,
    and `on_call(name)` before each call (the pool counts calls to tell a hung rank from its waiting peers)."""
    if cfg is None and on_call is None:
        yield
        return
    rng = random.Random(hash((cfg.seed, rank, cfg.placement)) if cfg else 0)
    before, after = PLACEMENTS[cfg.placement] if cfg else (False, False)

    def sleep():
        time.sleep(rng.uniform(0, cfg.max_delay_ms) / 1000)

    def wrap(fn, name):
        def delayed(*args, **kwargs):
            if on_call is not None:
                on_call(name)
            if before:
                sleep()
            out = fn(*args, **kwargs)
            if after:
                if isinstance(out, list):  # batch_isend_irecv
                    return [_DelayedWork(w, sleep) for w in out]
                if out is not None and hasattr(out, "wait"):
                    return _DelayedWork(out, sleep)
                sleep()
            return out
        return delayed

    saved = []
    for module in (dist, c10d):
        for name in WRAPPED:
            fn = getattr(module, name, None)
            if fn is not None:
                saved.append((module, name, fn))
                setattr(module, name, wrap(fn, name))
    try:
        yield
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
