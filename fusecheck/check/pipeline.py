"""What every stage of a check reads: the prepared case, the options, and how this process runs, compiles and
agrees with its peers. The single-process check and a sharded rank build one each (single.py,
fusecheck/sharded/check.py); the stages (eager.py, compiled.py, golden.py, judge.py) are the same for both.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

import torch

from fusecheck.backends import Backend
from fusecheck.case import Case
from fusecheck.check.options import CheckOptions
from fusecheck.runs.execute import RunResult
from fusecheck.runs.memory import MemoryLog, OutOfMemory, is_oom, oom_message
from fusecheck.policy import Policy

# run(fn, *, case=None, cotangents=None, digests_only=False, differs_from=None) -> RunResult: the target run
# once (on `case`'s inputs instead of the prepared ones when given)
Run = Callable[..., RunResult]


def _alone(flag: bool) -> bool:
    return flag


@dataclass
class Pipeline:
    case: Case                    # prepared: in the run dtype, on the device, eval mode
    opts: CheckOptions
    policy: Policy
    backend: Backend
    device: torch.device
    golden_dtype: torch.dtype     # the device's (fp64; fp32 where the device has none)
    golden_device: torch.device
    run: Run
    # any(flag) over the processes that check together: a stage that runs the target once more only on some
    # ranks would leave the others waiting in a collective (one process: the flag itself)
    agree: Callable[[bool], bool] = _alone
    # errors a stage re-raises as they are (a sharded rank: the communication backend's, so that a peer's
    # failure is told from this rank's own)
    raw: Callable[[BaseException], bool] = lambda exc: False
    progress: Callable[[str], None] = lambda name: None
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    mem: MemoryLog | None = None

    def __post_init__(self) -> None:
        if self.mem is None:
            self.mem = MemoryLog(self.device)

    @property
    def name(self) -> str:
        return self.case.name

    @contextlib.contextmanager
    def measured(self, name: str):
        """A phase: its time and peak memory recorded, an out-of-memory turned into one actionable error."""
        self.progress(name)
        t = time.perf_counter()
        try:
            with self.mem.phase(name):
                yield
        except Exception as exc:
            if is_oom(exc):
                raise OutOfMemory(oom_message(name, exc, self.device)) from None
            raise
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t

    def timed(self, name: str, fn: Callable) -> Callable:
        """`fn` whose time is booked to `name` (a stage nested in another: the judging of rows while the golden
        runs), so that the enclosing phase can hand it over with `carve`."""
        def call(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t
        return call

    def carve(self, inner: str, outer: str, before: float) -> None:
        """Take the time `inner` gained since it stood at `before` out of `outer`: each phase reports its own."""
        spent = self.timings.get(inner, 0.0) - before
        self.timings[outer] = self.timings.get(outer, 0.0) - spent

    def passes_through(self, exc: BaseException) -> bool:
        """Errors no stage rewords: a user's mistake already said, an out-of-memory, the backend's own."""
        from fusecheck.errors import UserError
        return isinstance(exc, (UserError, OutOfMemory)) or is_oom(exc) or self.raw(exc)


def nothing() -> ContextManager[Any]:
    return contextlib.nullcontext()
