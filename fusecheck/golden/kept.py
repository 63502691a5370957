"""Values the golden keeps in its own dtype where eager holds them in a lower one, and what eager's dtype still
means for them.

A cast the golden keeps (`h.float()` in an fp32 model, fallback.py) gives a golden value whose dtype the model
did not write: eager holds it in fp32, the golden in fp64. Its precision is the point; three things eager's
dtype decides must stay eager's, or the golden computes another function:
- bits: `h.view(torch.int32)` reinterprets 4-byte floats in eager; here it reads the value rounded to eager's
  dtype, as eager does, not 8-byte ones (shape and bits would differ);
- constants read from the dtype: `torch.finfo(h.dtype).max / .min / .eps / .tiny` passed to an op on such
  values are eager's dtype's (`clamp_min(finfo.eps)`, `nan_to_num`'s defaults), not fp64's;
- range: a result past eager's dtype's largest finite value is the infinity eager gets (`exp` overflows).
A written buffer of eager's dtype (`acc = torch.zeros(.., dtype=torch.float32); acc.index_add_(0, i, h)`)
receives the value in its own dtype, as eager's same-dtype operands.

A value is tracked from the kept cast through the ops whose floating operands are all tracked values (their
result has eager's dtype in eager too); one golden-dtype operand the model holds in fp64 ends it, as type
promotion does. Not covered: Python code that branches on `h.dtype` itself (not dispatched, so not seen here).
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils.weak import WeakTensorKeyDictionary

_FINFO = ("max", "min", "eps", "tiny")


@functools.lru_cache(maxsize=None)
def _swap(golden: torch.dtype, eager: torch.dtype, which: tuple[str, ...]) -> dict[float, float]:
    """golden's finfo constants (`which` of them) -> eager's: made once, read on every op of the golden."""
    theirs, ours = torch.finfo(golden), torch.finfo(eager)
    return {float(getattr(theirs, k)): float(getattr(ours, k)) for k in which}


def _precise(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    return a if torch.finfo(a).eps <= torch.finfo(b).eps else b


class KeptValues:
    """The golden tensors a kept cast produced, and the dtype eager holds each in."""

    def __init__(self, golden: torch.dtype):
        self.golden = golden
        self._eager = WeakTensorKeyDictionary()
        self.applied: dict[str, int] = {}  # what eager's dtype decided -> times

    def __bool__(self) -> bool:
        return len(self._eager) > 0

    def mark(self, out: Any, eager_dtype: torch.dtype, clip: bool = True) -> Any:
        """Record golden-dtype results as eager_dtype values; past eager's range they are infinities."""
        big = torch.finfo(eager_dtype).max
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.dtype == self.golden:
                self._eager[t] = eager_dtype
                if clip and t.numel():
                    over = t.abs() > big
                    t.masked_fill_(over & (t > 0), float("inf")).masked_fill_(over & (t < 0), float("-inf"))
        return out

    def eager_dtype(self, func, args, kwargs) -> torch.dtype | None:
        """The dtype eager computes this op's result in, when every golden-dtype operand is a kept value
        (0-dim ones count only when all are 0-dim, as in type promotion); else None."""
        ops = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.dtype == self.golden]
        shaped = [t for t in ops if t.dim() > 0] or ops
        if not shaped or any(t not in self._eager for t in shaped):
            return None
        out = self._eager[shaped[0]]
        for t in shaped[1:]:
            out = _precise(out, self._eager[t])
        return out

    def as_eager(self, func, args, kwargs, eager_dtype: torch.dtype):
        """The op's arguments with eager's dtype's meaning: bits read at that dtype, finfo constants of it."""
        if func is torch.ops.aten.view.dtype:
            self._count("bits read at eager's dtype (view as another dtype)")
            return (args[0].to(eager_dtype),) + tuple(args[1:]), kwargs
        ours = torch.finfo(eager_dtype)
        if func in (torch.ops.aten.nan_to_num.default, torch.ops.aten.nan_to_num_.default):
            args, kwargs = list(args), {**kwargs}  # its defaults are the dtype's largest values
            for i, (name, value) in enumerate((("posinf", ours.max), ("neginf", ours.min)), start=2):
                if i < len(args) and args[i] is None:
                    args[i] = value
                elif i >= len(args) and kwargs.get(name) is None:
                    kwargs[name] = value
            args = tuple(args)
        return self.constants_of(args, kwargs, eager_dtype)

    def constants_of(self, args, kwargs, eager_dtype: torch.dtype, which: tuple[str, ...] = _FINFO):
        """finfo constants of the golden's dtype (`which` of them) among the op's scalars become eager_dtype's.
        fallback.py applies the range ones to every op of the model: `(1.0 - mask.float()) *
        torch.finfo(scores.dtype).min` reads the golden's fp64 `scores`, and fp64's min meets an fp32 mask,
        overflows to -inf and makes 0 * -inf = NaN where eager's own dtype's min is finite (transformers'
        CANINE: an all-NaN golden under a finite eager); Longformer's masks sum such minima to -inf in fp64
        too and its softmax backward turned every gradient NaN. (eps and tiny stay fp64's there: the
        golden's own helpers, running inside its mode, read them.)"""
        swap = _swap(self.golden, eager_dtype, which)
        swapped = [0]

        def one(x):
            if type(x) is float and x in swap:
                swapped[0] += 1
                return swap[x]
            return x
        args, kwargs = pytree.tree_map(one, (args, kwargs))
        if swapped[0]:
            self._count("finfo constants of eager's dtype")
        return args, kwargs

    def into_written(self, func, args, kwargs):
        """Kept values written into a buffer of a lower dtype arrive in eager's dtype (eager's operands had
        the buffer's dtype: index_add_, index_put_, scatter_add_ require it)."""
        written = [a for a, s in zip(args, func._schema.arguments) if s.alias_info is not None
                   and s.alias_info.is_write and isinstance(a, torch.Tensor)]
        low = {a.dtype for a in written if a.is_floating_point() and a.dtype != self.golden}
        if len(low) != 1:
            return args, kwargs
        (dtype,) = low

        def one(x):
            if isinstance(x, torch.Tensor) and x.dtype == self.golden and x in self._eager:
                self._count(f"written into a {str(dtype).removeprefix('torch.')} buffer")
                return x.to(dtype)
            return x
        return pytree.tree_map(one, (args, kwargs))

    def _count(self, what: str) -> None:
        self.applied[what] = self.applied.get(what, 0) + 1
