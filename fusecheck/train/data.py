"""The one data stream every trajectory sees, and the loss: the target's own, else check's fixed cotangent.

A target may give `batches(step) -> inputs` (a tensor or a tuple of positional inputs) and
`loss(output, batch) -> scalar tensor`, on the Case it returns or in its module; both are read duck-typed.
Without `batches` every step trains on the target's example inputs (one fixed, seeded batch); without `loss`
the loss is sum over floating outputs of mean(output * cotangent), the cotangents drawn once as
`fusecheck check --train` draws them (execute.make_cotangents), so its gradient is check's backward scaled.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from fusecheck.case import Case, TargetError
from fusecheck.runs.execute import flatten_outputs, make_cotangents
from fusecheck.runs.cast import cast_tree


def target_module(spec: str | None) -> Any:
    """The module `load_target` imported for `spec` (FILE.py:NAME or module:NAME), or None."""
    if not spec or ":" not in spec:
        return None
    where = spec.rpartition(":")[0]
    if not where.endswith(".py"):
        return sys.modules.get(where)
    path = Path(where).resolve()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() == path:
            return module
    return None


def _hook(case: Case, module: Any, name: str) -> Callable | None:
    for owner in (case, module):
        fn = getattr(owner, name, None)
        if fn is not None:
            if not callable(fn):
                raise TargetError(f"the target's {name!r} is not callable")
            return fn
    return None


def _as_inputs(batch: Any, step: int) -> tuple:
    if isinstance(batch, torch.Tensor):
        return (batch,)
    if isinstance(batch, (tuple, list)) and batch:
        return tuple(batch)
    raise TargetError(f"the target's batches({step}) returned {type(batch).__name__}; expected a tensor or a "
                      "tuple of positional inputs")


@dataclass
class Stream:
    """`inputs(step)`: the step's positional inputs (as the target gives them); `loss(output, batch, dtype)`."""

    case: Case
    batches: Callable[[int], Any] | None
    user_loss: Callable[[Any, tuple], Any] | None
    seed: int
    cotangents: dict[str, torch.Tensor] | None = None

    @property
    def source(self) -> str:
        data = "the target's batches(step)" if self.batches else "the target's example inputs every step"
        loss = "the target's loss(output, batch)" if self.user_loss else \
            "sum of mean(output * fixed random cotangent)"
        return f"data: {data}; loss: {loss}"

    def inputs(self, step: int) -> tuple:
        if self.batches is None:
            return self.case.inputs
        try:
            batch = self.batches(step)
        except Exception as exc:
            raise TargetError(f"the target's batches({step}) raised {type(exc).__name__}: {exc}") from exc
        return _as_inputs(batch, step)

    def prepared(self, step: int, dtype: torch.dtype | None, device: torch.device | str) -> tuple:
        return cast_tree(self.inputs(step), dtype, device)

    def loss(self, output: Any, batch: tuple, acc: torch.dtype) -> torch.Tensor:
        """The scalar loss, in `acc` (fp32 for the op-dtype runs, fp64 for the shadow)."""
        if self.user_loss is not None:
            try:
                value = self.user_loss(output, batch)
            except Exception as exc:
                raise TargetError(f"the target's loss(output, batch) raised {type(exc).__name__}: {exc}") from exc
            if not isinstance(value, torch.Tensor) or value.numel() != 1 or not value.is_floating_point():
                raise TargetError("the target's loss(output, batch) must return a floating scalar tensor, not "
                                  f"{type(value).__name__} {tuple(getattr(value, 'shape', ()))}")
            return value.reshape(()).to(acc)
        outputs, _ = flatten_outputs(output)
        if self.cotangents is None:  # drawn once, from the first run's outputs, as check draws them
            self.cotangents = {k: v.detach().float().cpu() for k, v in make_cotangents(outputs, self.seed).items()}
            if not self.cotangents:
                raise TargetError(f"case {self.case.name!r}: no floating output requires grad: nothing to train")
        terms = [(outputs[k].to(acc) * c.to(device=outputs[k].device, dtype=acc)).mean()
                 for k, c in self.cotangents.items() if k in outputs]
        if len(terms) != len(self.cotangents):
            missing = sorted(set(self.cotangents) - set(outputs))
            raise RuntimeError(f"the run returned no {', '.join(missing)}, which the first run returned")
        return torch.stack(terms).sum()


def stream_for(case: Case, spec: str | None, seed: int) -> Stream:
    module = target_module(spec)
    return Stream(case, _hook(case, module, "batches"), _hook(case, module, "loss"), seed)

