"""Per-block verdicts: each block's eager, compiled and fp64 result on the *same* input, eager's own.

Judging the whole model end to end blurs where a problem starts: an error made in block 3 is carried, and
amplified, by every block after it. Here every block is replayed on the input eager gave it, so a block is
judged only for what it does itself (msprobe's per-module idea, per block). Compiled blocks are observable
only when each block is compiled on its own (`--regional`); with a whole-model compile only eager's per-block
error against fp64 is given, and the report says so.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from fusecheck.compare import Comparison, compare
from fusecheck.runs.execute import flatten_outputs, read_tensors
from fusecheck.runs.cast import cast_tree
from fusecheck.runs.memory import is_oom
from fusecheck.policy import Policy
from fusecheck.golden.judging_scope import as_caller
from fusecheck.golden.streamed.guard import Guard
from fusecheck.golden.streamed.upcast import upcast


def _detached(tree: Any) -> Any:
    return pytree.tree_map(lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, tree)


def _needs_grad(tree: Any) -> Any:
    return pytree.tree_map(lambda x: x.requires_grad if isinstance(x, torch.Tensor) else None, tree)


@dataclass
class BlockCall:
    args: tuple
    kwargs: dict
    grad_flags: Any           # which tensor leaves required grad (replays must match, or dynamo recompiles)
    eager: dict[str, torch.Tensor]
    compiled: dict[str, torch.Tensor] | None = None


class BlockRecorder(contextlib.AbstractContextManager):
    """Records each block's first call (input and output) during one eager run."""

    def __init__(self, blocks: list[tuple[str, torch.nn.Module]]):
        self.blocks = blocks
        self.calls: dict[str, BlockCall] = {}
        self._handles: list[Any] = []

    def __enter__(self) -> "BlockRecorder":
        for name, block in self.blocks:
            self._handles.append(block.register_forward_hook(self._hook(name), with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _hook(self, name: str) -> Callable:
        def hook(module, args, kwargs, output):
            if name not in self.calls:
                self.calls[name] = BlockCall(_detached(args), _detached(kwargs), _needs_grad((args, kwargs)),
                                             {k: v.detach().clone() for k, v in flatten_outputs(output)[0].items()})
        return hook


def _replay_inputs(call: BlockCall) -> tuple[tuple, dict]:
    flat, spec = pytree.tree_flatten((call.args, call.kwargs))
    flags = pytree.tree_leaves(call.grad_flags)
    flat = [x.clone().requires_grad_(bool(f)) if isinstance(x, torch.Tensor) and f else x for x, f in zip(flat, flags)]
    return pytree.tree_unflatten(flat, spec)


def replay_compiled(recorder: BlockRecorder, grad: bool) -> None:
    """Call every (regionally compiled) block on eager's recorded input; keep its outputs."""
    with torch.set_grad_enabled(grad):
        for name, block in recorder.blocks:
            call = recorder.calls.get(name)
            if call is not None:
                args, kwargs = _replay_inputs(call)
                call.compiled = {k: v.detach().clone() for k, v in flatten_outputs(block(*args, **kwargs))[0].items()}


@dataclass
class BlockVerdict:
    name: str
    rows: list[Comparison]
    compiled_observed: bool
    notes: list[str] = field(default_factory=list)

    @property
    def main(self) -> Comparison | None:
        """The row that speaks for the block: its worst-ratio floating output."""
        rows = [r for r in self.rows if r.reference_vs_golden is not None]
        return max(rows, key=lambda r: r.error_ratio or 0.0, default=self.rows[0] if self.rows else None)

    @property
    def worse(self) -> bool:
        return self.compiled_observed and any(not r.passed for r in self.rows)

    def to_dict(self) -> dict:
        m = self.main
        eager = m.reference_vs_golden.rmse if m is not None and m.reference_vs_golden is not None else None
        comp = m.vs_golden.rmse if m is not None and self.compiled_observed and m.vs_golden is not None else None
        return {"name": self.name, "eager_rmse": eager, "compiled_rmse": comp,
                "ratio": m.error_ratio if m is not None and self.compiled_observed else None,
                "verdict": (m.verdict.status.value if self.compiled_observed and m is not None else None)
                if not self.worse else "FAIL",
                "failed_checks": sorted({c for r in self.rows for c in r.verdict.failed_checks}),
                "notes": list(self.notes)}


def judge_blocks(recorder: BlockRecorder, dtype: torch.dtype, device: torch.device | None,
                 policy: Policy, model: torch.nn.Module | None = None) -> list[BlockVerdict]:
    """The fp64 golden of each block on eager's input to it (one block upcast at a time), judged.

    The model's other tensors (`model`'s, else the other blocks') are guarded as in the streamed golden: a
    block that reads them sees their fp64 copies; one whose replay cannot be made equal to the whole copy's
    (or fails) is not judged per block, and its verdict says why."""
    tensors = read_tensors(model) if model is not None else {
        f"{n}.{k}": t for n, b in recorder.blocks for k, t in read_tensors(b).items()}
    verdicts = []
    for name, block in recorder.blocks:
        call = recorder.calls.get(name)
        if call is None:
            continue
        try:
            with torch.no_grad(), Guard(tensors, dtype, device), upcast(block, dtype, device):
                out = block(*cast_tree(call.args, dtype, device), **cast_tree(call.kwargs, dtype, device))
        except Exception as exc:
            if is_oom(exc):
                raise
            verdicts.append(BlockVerdict(name, [], call.compiled is not None, [
                f"not judged per block: its fp64 replay failed ({type(exc).__name__}: {str(exc)[:160]})"]))
            continue
        golden = {k: v.detach() for k, v in flatten_outputs(out)[0].items()}
        with as_caller():  # the replay ran in the golden's modes and default dtype; the comparison must not
            rows = _judged(name, call, golden, policy)
        verdicts.append(BlockVerdict(name, rows, call.compiled is not None))
    return verdicts


def _judged(name: str, call, golden: dict, policy) -> list:
    """One block's rows: its compiled (else eager's) outputs against the replay's golden ones."""
    rows = []
    for key, eager in call.eager.items():
        if not eager.is_floating_point() or key not in golden:
            continue
        g = golden[key].to(eager.device)
        if call.compiled is not None and key in call.compiled:
            rows.append(compare(call.compiled[key], eager, g, policy=policy, name=f"{name}:{key}"))
        else:  # no compiled block: eager against itself, which gives eager's own error against the golden
            rows.append(compare(eager, eager, g, policy=policy, name=f"{name}:{key}"))
    return rows


def first_worse(verdicts: list[BlockVerdict]) -> str | None:
    return next((v.name for v in verdicts if v.worse), None)
