"""Ops with no kernel in the golden dtype run one step lower, and the report names them.

Some ops have no fp64 kernel at all (``torch._grouped_mm`` in MoE layers, several fused attention and
quantized kernels). Without a fallback the golden run crashes and no verdict is possible. With it, such an
op runs in the fallback dtype (fp32) on downcast copies of its fp64 inputs and its results are upcast
again; the golden stays fp64 everywhere else. The report lists every op that fell back, because there the
golden is only as precise as the fallback dtype: never a silent relaxation.
"""
from __future__ import annotations

from typing import Any

import torch
from torch._ops import HigherOrderOperator
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from fusecheck.runs.cast import COMPLEX_OF


from fusecheck.errors import GoldenError  # noqa: E402,F401


def _recast(tree: Any, src: torch.dtype, dst: torch.dtype) -> Any:
    pairs = {src: dst, COMPLEX_OF.get(src): COMPLEX_OF.get(dst)}
    return pytree.tree_map(lambda x: x.to(pairs[x.dtype]) if isinstance(x, torch.Tensor) and x.dtype in pairs
                           and pairs[x.dtype] is not None else x, tree)


def _uses(tree: Any, dtype: torch.dtype) -> bool:
    wanted = {dtype, COMPLEX_OF.get(dtype)}
    return any(isinstance(x, torch.Tensor) and x.dtype in wanted for x in pytree.tree_leaves(tree))


class GoldenFallback(TorchDispatchMode):
    """Retry an op that fails on `golden` dtype inputs in `fallback` dtype; record it in `fell_back`.

    Only ops that fail are retried, and only when the retry succeeds: an op that fails for another reason
    (a shape error) fails again and its first error is raised. In-place and out= ops are not retried (the
    result would land in a copy), so they raise with their own message.
    """

    # torch.cond, flex_attention, while_loop...: without this the mode refuses them outright; they run as
    # they are (their inner ops are not retried: the HOP's own implementation runs below this mode)
    supports_higher_order_operators = True

    def __init__(self, golden: torch.dtype, fallback: torch.dtype = torch.float32):
        super().__init__()
        self.golden, self.fallback = golden, fallback
        self.fell_back: dict[str, str] = {}  # op name -> the error that made it fall back

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, HigherOrderOperator):
            return func(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        except (RuntimeError, NotImplementedError) as exc:
            if func._schema.is_mutable or not _uses((args, kwargs), self.golden):
                raise
            low_args, low_kwargs = _recast((args, kwargs), self.golden, self.fallback)
            try:
                out = func(*low_args, **low_kwargs)
            except Exception:
                raise exc from None
            why = str(exc).splitlines()[0][:160]
            mixed = _floating_dtypes((args, kwargs)) - {self.golden}
            if mixed:  # the op has a kernel: an operand arrived in a lower dtype (the model cast it)
                why = "mixed: " + ", ".join(sorted(str(d).removeprefix("torch.") for d in mixed))
            self.fell_back.setdefault(str(func.overloadpacket.__name__), why)
            return _recast(out, self.fallback, self.golden)

    def notes(self) -> list[str]:
        fb = str(self.fallback).removeprefix("torch.")
        gd = str(self.golden).removeprefix("torch.")
        return [_note(op, why, gd, fb) for op, why in sorted(self.fell_back.items())]


def _note(op: str, why: str, gd: str, fb: str) -> str:
    if why.startswith("mixed: "):
        return (f"golden: {op} received {gd} operands beside {why.removeprefix('mixed: ')} ones (the model casts "
                f"inside its forward, e.g. `x.float()` or `.to(weight.dtype)` with a constant dtype); it ran in "
                f"{fb}, so the golden is only {fb}-precise through it")
    return f"golden: {op} has no {gd} kernel here ({why}); it ran in {fb}, so the golden is only {fb}-precise through it"


def _floating_dtypes(tree: Any) -> set[torch.dtype]:
    return {x.dtype for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor) and x.is_floating_point()
            and x.dim() > 0}
