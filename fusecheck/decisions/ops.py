"""The decision ops, as a registry: which output holds the chosen indices, along which dim.

Two levels see them: the dynamo graph of compiled (torch functions and methods, `DYNAMO_NAMES`) and the
dispatch of eager and the golden (aten overloads, `ATEN_OPS`). Each torch-level call is one aten call, so
both sequences line up call by call (checked by the shape of the indices).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

aten = torch.ops.aten


def bound_args(func, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Every argument of an aten call by name, defaults filled in from its schema."""
    out = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


@dataclass(frozen=True)
class DecisionOp:
    """`indices_at`/`values_at`: position of the indices/values in the op's output tuple (None: the output
    itself is the indices; no values). `keeps_dim`: whether the indices keep the decided dim."""

    indices_at: int | None
    values_at: int | None
    keeps_dim: Callable[[dict], bool]

    def dim(self, bound: dict) -> int | None:
        return bound.get("dim")

    def indices(self, out) -> torch.Tensor:
        return out if self.indices_at is None else out[self.indices_at]


def _always(bound: dict) -> bool:
    return True


def _keepdim(bound: dict) -> bool:
    return bool(bound.get("keepdim", False))


_SELECTING = DecisionOp(1, 0, _always)       # topk, sort: k (or all) indices along dim
_REDUCING = DecisionOp(1, 0, _keepdim)       # max.dim, min.dim: one index along dim
_ARG = DecisionOp(None, None, _keepdim)      # argmax, argmin (dim None: over the flattened tensor)

ATEN_OPS: dict[Any, DecisionOp] = {
    aten.topk.default: _SELECTING,
    aten.sort.default: _SELECTING,
    aten.sort.stable: _SELECTING,
    aten.max.dim: _REDUCING,
    aten.min.dim: _REDUCING,
    aten.argmax.default: _ARG,
    aten.argmin.default: _ARG,
}

# dynamo graph: function or method name -> where its indices are (None: the result itself)
DYNAMO_NAMES: dict[str, int | None] = {"topk": 1, "sort": 1, "max": 1, "min": 1, "argsort": None,
                                       "argmax": None, "argmin": None}
