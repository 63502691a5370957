"""The gate registry: one entry per kind of compiler decision the bisector can count and refuse.

Order is the coarse stage's order; `GATES[kind].install(log)` returns a context manager that counts that
kind's decisions during a compile (see `base.py`).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from fusecheck.bisect.gates import config, decomposition, fusion, inlining, lowering, passes, pattern
from fusecheck.bisect.gates.base import Decision, DecisionLog, Gate, GateUnavailable, Plan

GATES: dict[str, Gate] = {g.kind: g for g in [
    Gate("config", "Inductor settings that trade accuracy for speed", config.install),
    Gate("pass", "graph passes run through GraphTransformObserver (incl. custom pass slots)", passes.install),
    Gate("pattern", "pattern-matcher replacements, one per match", pattern.install),
    Gate("decomposition", "decomposition-table applications during tracing", decomposition.install),
    Gate("lowering", "an op lowered to Inductor IR instead of calling its aten kernel", lowering.install),
    Gate("inlining", "lowering-time inlining of a pointwise/reduction value into its consumers", inlining.install),
    Gate("fusion", "scheduler fusion of two nodes into one kernel", fusion.install),
]}


@contextlib.contextmanager
def gated(plans: dict[str, Plan], kinds: list[str] | None = None,
          unavailable: dict[str, str] | None = None) -> Iterator[DecisionLog]:
    """Install the gates of `kinds` (all by default) for one compile; yields the log of what they saw.
    Gates the installed torch cannot support are recorded in `unavailable` and skipped."""
    log = DecisionLog(plans)
    with contextlib.ExitStack() as stack:
        for kind in kinds or list(GATES):
            try:
                stack.enter_context(GATES[kind].install(log))
            except GateUnavailable as exc:
                if unavailable is not None:
                    unavailable[kind] = str(exc)
        yield log


__all__ = ["GATES", "Decision", "DecisionLog", "Gate", "GateUnavailable", "Plan", "gated"]
