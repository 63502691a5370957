"""How the golden is run: a registry of modes, each handing `(name, golden tensor)` to a sink as results appear.

- `whole`: a deep copy of the model upcast to fp64 (the fallback for models without blocks, and for models
  that update their own state in place, whose fp64 state must be judged too).
- `streamed`: the model's own forward and backward with one piece upcast at a time (fusecheck/streamed/);
  parameter gradients reach the sink during the backward pass, one piece at a time.
Both give the same golden: the same ops in the same order in fp64.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from fusecheck.case import Case
from fusecheck.execute import StateSnapshot, restore_state, run_once, state_snapshot
from fusecheck.golden import cast_tree, golden_case
from fusecheck.streamed.golden import StreamedGolden
from fusecheck.streamed.plan import BlockPlan

Sink = Callable[[str, torch.Tensor], None]


@dataclass
class GoldenRequest:
    prepared: Case
    state: StateSnapshot
    train: bool
    cotangents: dict[str, torch.Tensor] | None
    dtype: torch.dtype
    device: torch.device       # where the golden computes (the run's device, or the host)
    mutated: tuple[str, ...]   # state/input keys that eager or compiled changed: judged like outputs
    plan: BlockPlan | None
    notes: list[str] = field(default_factory=list)  # what the golden run chose, for the report


def _cotangents(req: GoldenRequest):
    return cast_tree(req.cotangents, req.dtype, req.device) if req.cotangents is not None else None


def run_whole(req: GoldenRequest, sink: Sink) -> None:
    restore_state(req.prepared, req.state)  # the golden copies the model as every run starts, not as the last left it
    gcase = golden_case(req.prepared, req.dtype, req.device)
    golden = run_once(gcase.model, gcase, train=req.train, cotangents=_cotangents(req), state=state_snapshot(gcase))
    del gcase
    for name, t in golden.all(req.mutated).items():
        sink(name, t)


def run_streamed(req: GoldenRequest, sink: Sink) -> None:
    """Streamed; a model that reads a streamed piece's weights from outside it (a dtype mismatch before any
    result reached the sink) is run again with every piece outside the blocks upcast for the whole run."""
    delivered: list[str] = []

    def counting(name: str, t: torch.Tensor) -> None:
        delivered.append(name)
        sink(name, t)
    try:
        _run_streamed(req, req.plan, counting)
    except RuntimeError as exc:
        if delivered or not req.plan.units or "type" not in str(exc):
            raise
        req.notes.append(f"streamed golden: the model reads weights of a piece outside that piece ({exc}); "
                         "every piece outside the blocks is upcast for the whole run")
        _run_streamed(req, req.plan.all_resident(), sink)


def _run_streamed(req: GoldenRequest, plan: BlockPlan, sink: Sink) -> None:
    restore_state(req.prepared, req.state)
    p = req.prepared
    gcase = Case(p.model, cast_tree(p.inputs, req.dtype, req.device), p.name, cast_tree(p.kwargs, req.dtype, req.device))
    with StreamedGolden(p.model, plan, req.dtype, req.device, train=req.train,
                        on_grad=lambda n, g: sink(f"grad.{n}", g)) as streamed:
        golden = run_once(p.model, gcase, train=req.train, cotangents=_cotangents(req), param_grads=False)
        streamed.finish()
    for name, t in golden.all(req.mutated).items():
        sink(name, t)


GOLDEN_MODES: dict[str, Callable[[GoldenRequest, Sink], None]] = {"whole": run_whole, "streamed": run_streamed}
