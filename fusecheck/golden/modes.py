"""How the golden is run: a registry of modes, each handing `(name, golden tensor)` to a sink as results appear.

- `whole`: a deep copy of the model upcast to fp64 (the fallback for models without blocks, and for models
  that update their own state in place, whose fp64 state must be judged too).
- `streamed`: the model's own forward and backward with one piece upcast at a time (fusecheck/golden/streamed/);
  parameter gradients reach the sink during the backward pass, one piece at a time.
Both give the same golden: the same ops in the same order, on the same values, in the same dtypes. Where the
streamed golden cannot guarantee that for a model (`StreamedLeak`, or it fails), it steps aside before any
result reached the sink: the whole-model golden runs instead when its fp64 copy fits in memory, and a note
says why; otherwise the run fails with the reason (a row is judged once, when its golden arrives, so a
golden cannot be replaced after some rows were judged).
"""
from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from fusecheck.case import Case, TargetError
from fusecheck.runs.execute import StateSnapshot, module_tensors, restore_state, run_once, state_snapshot
from fusecheck.runs.cast import cast_tree, golden_case
from fusecheck.runs.memory import is_oom
from fusecheck.golden.streamed.golden import StreamedGolden
from fusecheck.golden.streamed.guard import StreamedLeak
from fusecheck.golden.streamed.plan import BlockPlan

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
    stepped_aside: str | None = None  # why the streamed golden gave way to the whole copy (later passes too)


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
    """The streamed golden, or the whole-model golden where the streamed one cannot be the same (see the
    module docstring). A second golden pass (decisions followed) takes the whole copy at once."""
    if req.stepped_aside is not None:
        run_whole(req, sink)
        return
    delivered: list[str] = []

    def counting(name: str, t: torch.Tensor) -> None:
        delivered.append(name)
        sink(name, t)
    modes = _ModeStates()
    try:
        _run_streamed(req, req.plan, counting)
        return
    except TargetError:
        raise
    except Exception as exc:
        if is_oom(exc):
            raise
        why = _reason(exc)
        if delivered:
            raise RuntimeError(f"the streamed golden failed after {len(delivered)} result(s) were judged ({why}); "
                               "it cannot step aside now: run with --golden whole") from exc
        failure = exc
    modes.restore()  # the modes under the golden (decisions followed) start again, as for a first run
    need, free = whole_copy_bytes(req), free_bytes(req.device)
    if free is None or need <= free:
        room = f"about {_size(need)} of {_size(free)} free" if free is not None else f"about {_size(need)}"
        req.stepped_aside = why
        req.notes.append(f"golden: the streamed golden stepped aside ({why}); the golden is a whole-model "
                         f"{str(req.dtype).removeprefix('torch.')} copy instead ({room})")
        run_whole(req, sink)
        return
    raise RuntimeError(f"the streamed golden cannot give the whole-model golden of this model ({why}), and a "
                       f"whole {str(req.dtype).removeprefix('torch.')} copy needs about {_size(need)} with "
                       f"{_size(free)} free on {req.device}") from failure


def _size(n: float) -> str:
    return f"{n / 2 ** 30:.2f} GiB" if n >= 2 ** 30 else f"{n / 2 ** 20:.1f} MiB"


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    text = text if len(text) <= 200 else text[:197] + "..."
    return text if isinstance(exc, StreamedLeak) else f"{type(exc).__name__}: {text}"


def whole_copy_bytes(req: GoldenRequest) -> int:
    """What the whole-model golden adds: the deep copy (run dtype) and its floating tensors in the golden
    dtype, x2 with train for their gradients. Each shared tensor once."""
    tensors = {id(t): t for t in module_tensors(req.prepared.model).values()}.values()
    item = req.dtype.itemsize
    floating = sum(t.numel() * (2 * item if t.is_complex() else item)
                   for t in tensors if t.is_floating_point() or t.is_complex())
    return sum(t.numel() * t.element_size() for t in tensors) + floating * (2 if req.train else 1)


def free_bytes(device: torch.device) -> int | None:
    """Memory free on `device` now (None where it cannot be read: then the whole copy is tried)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


class _ModeStates:
    """The state of the dispatch modes the golden runs under (the decision follower counts decisions, the
    fallback records ops), kept so that a golden run again after a failed attempt starts where it did."""

    def __init__(self):
        self.saved = [(m, {k: _copied(v) for k, v in vars(m).items()}) for m in _get_current_dispatch_mode_stack()]

    def restore(self) -> None:
        for mode, state in self.saved:
            vars(mode).clear()
            vars(mode).update({k: _copied(v) for k, v in state.items()})


def _copied(v):
    if isinstance(v, (dict, list, set)):
        return copy.copy(v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return copy.deepcopy(v)
    return v


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
