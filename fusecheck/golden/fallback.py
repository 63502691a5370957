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

from fusecheck.golden.kept import KeptValues
from fusecheck.runs.cast import COMPLEX_OF


from fusecheck.errors import GoldenError  # noqa: E402,F401


def _recast(tree: Any, casts: dict) -> Any:
    """Every tensor of `tree` whose dtype `casts` maps, cast to what it maps to."""
    return pytree.tree_map(lambda x: x.to(casts[x.dtype]) if isinstance(x, torch.Tensor) and casts.get(x.dtype)
                           is not None else x, tree)


def _pairs(src: torch.dtype, dst: torch.dtype) -> dict:
    """src -> dst, and their complex dtypes alike."""
    return {src: dst, COMPLEX_OF.get(src): COMPLEX_OF.get(dst)}


def _autograd_own_op() -> bool:
    """Whether a built-in autograd node's backward issued this op (its formula, or the engine casting a
    gradient to its input's dtype; grad mode is off there). The model's own code may run inside a backward
    too: a Python Function's backward (a reentrant checkpoint, the streamed golden's pieces), or a
    non-reentrant checkpoint's recompute, which runs the forward with grad mode on inside a built-in node's
    unpacking of a saved tensor. Its casts are the model's."""
    node = torch._C._current_autograd_node()
    return (node is not None and not isinstance(node, torch.autograd.function.BackwardCFunction)
            and not torch.is_grad_enabled())


RANGE = ("max", "min")  # finfo constants that mask values are made of


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

    def __init__(self, golden: torch.dtype, fallback: torch.dtype = torch.float32,
                 run: torch.dtype | None = None):
        super().__init__()
        self.golden, self.fallback = golden, fallback
        self.fell_back: dict[str, str] = {}  # op name -> the error that made it fall back
        # `run`: the dtype eager computes in. A cast to a floating dtype at least as precise (and as wide) as it
        # (`x.float()`, `.to(torch.float32)` in an RMSNorm, `softmax(dtype=torch.float32)`) is an upcast or
        # nothing in eager; in the golden it would round every value to that dtype, and there the golden
        # would compute in eager's own precision with eager's own ops (the two then share their rounding,
        # and a compiled kernel that rounds otherwise looks worse than eager). Such a dtype argument is the
        # golden's own; a cast to a less precise dtype (a deliberate bf16 round trip in an fp32 model) stays.
        self.run = run
        self.kept: dict[str, int] = {}  # "op to dtype" -> casts kept in the golden dtype
        self.values = KeptValues(golden)  # what they produced, and the dtype eager holds each in
        self.upcast: set[str] = set()  # ops whose lower-dtype operands were upcast to the golden's
        self.stood_down: str | None = None  # why the casts were not kept after all (stand_down)
        # torch's default dtype the golden ran with, where the caller's failed (check/golden.py: XGLM's constants)
        self.default_dtype: torch.dtype | None = None

    def stand_down(self, who: str, exc: BaseException) -> None:
        """Keep no cast from now on (the model's code gave the kept values another meaning): a later golden
        run rounds at the model's casts as written. `who` failed with them kept, raising `exc`."""
        first = str(exc).splitlines()[0][:160] if str(exc) else ""
        self.run, self.stood_down = None, f"with them kept, {who} failed: {type(exc).__name__}: {first}"
        self.kept.clear()
        self.values = KeptValues(self.golden)

    def _keeps(self, dtype: Any) -> bool:
        return (self.run is not None and isinstance(dtype, torch.dtype) and dtype.is_floating_point
                and dtype != self.golden and dtype.itemsize < self.golden.itemsize
                and torch.finfo(dtype).eps <= torch.finfo(self.run).eps
                and torch.finfo(dtype).max >= torch.finfo(self.run).max)  # fp16 in a bf16 model: less range

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, HigherOrderOperator):
            return func(*args, **kwargs)
        # a golden value converted down (not an allocation: factories, FSDP's and collectives' buffers keep
        # their dtype; nor an out= buffer)
        kept_as = None
        # not autograd's own cast in a backward: it gives a gradient the dtype of its forward input, and a tensor
        # the golden holds in a lower dtype (an fp32 accumulator from a factory) must get its own
        if (self._keeps(kwargs.get("dtype")) and not func._schema.is_mutable and _uses(args, self.golden)
                and not _autograd_own_op()):
            kept_as = kwargs["dtype"]
            what = f"{func.overloadpacket.__name__} to {str(kept_as).removeprefix('torch.')}"
            self.kept[what] = self.kept.get(what, 0) + 1
            kwargs = {**kwargs, "dtype": self.golden}
        elif self.values:
            if func._schema.is_mutable:
                args, kwargs = self.values.into_written(func, args, kwargs)
            kept_as = self.values.eager_dtype(func, args, kwargs)
            if kept_as is not None:
                args, kwargs = self.values.as_eager(func, args, kwargs, kept_as)
        if kept_as is None and self.run is not None:  # the model read its dtype's range: eager's reads eager's
            args, kwargs = self.values.constants_of(args, kwargs, self.run, RANGE)
        out = self._run(func, args, kwargs)
        if kept_as is not None:
            self.values.mark(out, kept_as, clip=not func.is_view)  # a view of a kept value is in range already
        return out

    def _run(self, func, args, kwargs):
        try:
            return func(*args, **kwargs)
        except (RuntimeError, NotImplementedError) as exc:
            if func._schema.is_mutable or not _uses((args, kwargs), self.golden):
                raise
            mixed = _floating_dtypes((args, kwargs)) - {self.golden}
            if mixed:  # an operand arrived in a lower dtype (the model cast it): upcast it, exactly
                up_args, up_kwargs = _recast((args, kwargs), dict.fromkeys(mixed, self.golden))
                try:
                    out = func(*up_args, **up_kwargs)
                    self.upcast.add(str(func.overloadpacket.__name__))
                    return out
                except Exception:
                    pass
            low_args, low_kwargs = _recast((args, kwargs), _pairs(self.golden, self.fallback))
            try:
                out = func(*low_args, **low_kwargs)
            except Exception:
                raise exc from None
            why = str(exc).splitlines()[0][:160]
            if mixed:
                why = "mixed: " + ", ".join(sorted(str(d).removeprefix("torch.") for d in mixed))
            self.fell_back.setdefault(str(func.overloadpacket.__name__), why)
            return _recast(out, _pairs(self.fallback, self.golden))

    def notes(self) -> list[str]:
        fb = str(self.fallback).removeprefix("torch.")
        gd = str(self.golden).removeprefix("torch.")
        kept = ([f"golden: the model's casts to its compute dtype ({str(self.run).removeprefix('torch.')}) or a "
                 f"more precise one stay {gd} in the golden (the model computed in {gd}; rounding there would "
                 "share eager's rounding): " + ", ".join(f"{what} x{n}" for what, n in sorted(self.kept.items()))]
                if self.kept else [])
        if self.values.applied:
            kept.append("golden: where the model reads its dtype, the golden takes eager's dtype's meaning: "
                        + ", ".join(f"{what} x{n}" for what, n in sorted(self.values.applied.items())))
        if self.upcast:
            kept.append(f"golden: {', '.join(sorted(self.upcast))} received operands the model cast below {gd} "
                        f"beside {gd} ones; those were upcast (exactly) and the op ran in {gd}")
        if self.stood_down:
            kept.append(f"golden: the model's casts round as written in the golden ({self.stood_down}), so "
                        "the golden is only as precise as eager's dtype after each of them")
        return kept + [_note(op, why, gd, fb) for op, why in sorted(self.fell_back.items())]


def _note(op: str, why: str, gd: str, fb: str) -> str:
    if why.startswith("mixed: "):
        return (f"golden: {op} received {gd} operands beside {why.removeprefix('mixed: ')} ones (the model casts "
                f"inside its forward, e.g. `x.float()` or `.to(weight.dtype)` with a constant dtype); it ran in "
                f"{fb}, so the golden is only {fb}-precise through it")
    return f"golden: {op} has no {gd} kernel here ({why}); it ran in {fb}, so the golden is only {fb}-precise through it"


def eager_precision(case: Any, requested: torch.dtype | None) -> torch.dtype | None:
    """The dtype eager computes in: the one asked for, else the floating dtype that holds most of the
    parameters' elements (the inputs' when there are none). A bf16 model with fp32 norms or an fp32 residual
    stream computes in bf16 and keeps its bf16 casts; an fp32 model holding one bf16 scale computes in fp32,
    and its `.to(torch.bfloat16)` is a rounding the model asks for, which stays."""
    if requested is not None:
        return requested
    model = getattr(case, "model", None)
    params = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    held: dict[torch.dtype, int] = {}
    for t in pytree.tree_leaves(params if any(p.is_floating_point() for p in params)
                                else (case.inputs, case.kwargs)):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            held[t.dtype] = held.get(t.dtype, 0) + t.numel()
    return max(held, key=lambda d: (held[d], -torch.finfo(d).eps), default=None)


def _floating_dtypes(tree: Any) -> set[torch.dtype]:
    return {x.dtype for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor) and x.is_floating_point()
            and x.dim() > 0}
