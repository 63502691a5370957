"""The decision ops, as a registry of small entries: what a run chose, and how the golden takes that choice.

Four kinds of decision, each a `Decision` subclass:
- `Selecting` (topk, sort, argmax/argmin, max/min over a dim): indices along a dim; a row's choice is tied
  when the golden's values at the two choices differ by at most the limit;
- `Masking` (relu): which elements pass; tied where the golden's input is within the limit of 0, the
  boundary (the choice routes the gradient: `threshold_backward` reads relu's output);
- `Pooling` (max_pool2d_with_indices): the argmax of each window; tied when the golden's values at the two
  positions differ by at most the limit and the run's position lies in the window (the backward scatters the
  gradient to it);
- `Clipping` (hardtanh, so relu6): which elements lie strictly between the bounds and pass the gradient;
  tied where the golden's input is within the limit of a bound. The forward value is continuous there, so
  only the backward changes: `hardtanh_backward` reads the saved input, and the golden's is rerouted
  (`BACKWARD_ROUTES`, follow.py).
Two levels see them: the dynamo graph of compiled (torch functions and methods, `DYNAMO_TAPS`, tapped in
decisions/tap.py) and the dispatch of eager and the golden (aten overloads, `ATEN_OPS`). Each torch-level call
is one aten call, so both sequences line up call by call (checked by shape).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

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


@dataclass
class Taken:
    """What following one decision call did: its output, and per row whether the run's choice was taken."""

    out: Any
    taken: int = 0
    refused: int = 0
    largest_gap: float = 0.0             # over the taken rows
    smallest_refused: float = float("inf")  # gap / limit over the refused rows
    # a decision whose backward reads its input, not its output: (rows taken, the run's choice), applied to
    # the gradient by the golden's backward (BACKWARD_ROUTES)
    route: tuple[torch.Tensor, torch.Tensor] | None = None


def _tally(out, differs: torch.Tensor, gap: torch.Tensor, limit: float) -> tuple[Taken, torch.Tensor]:
    """Rows where the choices differ, split by the gap (inf where the run's choice is invalid)."""
    take = differs & (gap <= limit)
    refused = differs & ~take
    t = Taken(out, int(take.sum()), int(refused.sum()))
    if t.taken:
        t.largest_gap = float(gap[take].max())
    if t.refused:
        t.smallest_refused = float(gap[refused].min()) / max(limit, 1e-300)
    return t, take


class Decision:
    sides = 2  # how many values a run's error moves to change this choice (see follow.py)

    def choice(self, bound: dict, out) -> torch.Tensor:
        raise NotImplementedError

    def follow(self, bound: dict, x: torch.Tensor, out, mine: torch.Tensor, theirs: torch.Tensor,
               limit: float) -> Taken:
        raise NotImplementedError


@dataclass(frozen=True)
class Selecting(Decision):
    """`indices_at`/`values_at`: position of the indices/values in the op's output tuple (None: the output
    itself is the indices; no values). `keeps_dim`: whether the indices keep the decided dim."""

    indices_at: int | None
    values_at: int | None
    keeps_dim: Callable[[dict], bool]

    def choice(self, bound, out):
        return out if self.indices_at is None else out[self.indices_at]

    def _view(self, x, idx, bound):
        dim = bound.get("dim")
        if dim is None:  # argmax/argmin over the flattened tensor
            return x.reshape(-1), idx.reshape(1), 0
        dim = dim % max(x.dim(), 1)
        return x, (idx if self.keeps_dim(bound) else idx.unsqueeze(dim)), dim

    def follow(self, bound, x, out, mine, theirs, limit):
        xv, gi, dim = self._view(x, mine, bound)
        _, ri, _ = self._view(x, theirs, bound)
        valid = (ri >= 0) & (ri < xv.shape[dim])
        gap = (xv.gather(dim, gi) - xv.gather(dim, torch.where(valid, ri, gi))).abs().double()
        gap = torch.where(valid & ~torch.isnan(gap), gap, torch.inf).amax(dim, keepdim=True)
        t, take = _tally(out, (gi != ri).any(dim, keepdim=True), gap, limit)
        chosen = torch.where(take, ri, gi)
        if self.indices_at is None:
            t.out = chosen.reshape(mine.shape)
            return t
        res = list(out)
        res[self.indices_at] = chosen.reshape(mine.shape)
        if self.values_at is not None:
            res[self.values_at] = xv.gather(dim, chosen).reshape(out[self.values_at].shape)
        t.out = tuple(res)
        return t


@dataclass(frozen=True)
class Masking(Decision):
    """relu: element i passes when x_i > 0."""

    sides = 1

    def choice(self, bound, out):
        return out > 0

    def follow(self, bound, x, out, mine, theirs, limit):
        gap = torch.where(torch.isnan(x), torch.inf, x.abs()).double()
        t, take = _tally(out, mine != theirs, gap, limit)
        tiny = torch.finfo(x.dtype).tiny
        passed = x.abs().clamp_min(tiny)  # > 0, so that threshold_backward lets the gradient through
        t.out = torch.where(take & theirs, passed, torch.where(take & ~theirs, torch.zeros_like(x), out))
        return t


def _pair(v, default):
    v = default if v is None or (isinstance(v, (list, tuple)) and len(v) == 0) else v
    return (v, v) if isinstance(v, int) else (tuple(v) * 2 if len(v) == 1 else tuple(v))


@dataclass(frozen=True)
class Pooling(Decision):
    """max_pool2d_with_indices: per window, the flat position (over H x W) of its maximum."""

    def choice(self, bound, out):
        return out[1]

    def _in_window(self, bound, idx: torch.Tensor, width: int) -> torch.Tensor:
        k = _pair(bound.get("kernel_size"), 1)
        s = _pair(bound.get("stride"), k)
        p = _pair(bound.get("padding"), 0)
        d = _pair(bound.get("dilation"), 1)
        oh = torch.arange(idx.shape[-2], device=idx.device)[:, None]
        ow = torch.arange(idx.shape[-1], device=idx.device)[None, :]
        ok = torch.ones_like(idx, dtype=torch.bool)
        for pos, o, ki, si, pi, di in ((idx // width, oh, k[0], s[0], p[0], d[0]),
                                       (idx % width, ow, k[1], s[1], p[1], d[1])):
            off = pos + pi - o * si
            ok &= (off >= 0) & (off % di == 0) & (off // di < ki)
        return ok

    def follow(self, bound, x, out, mine, theirs, limit):
        values, _ = out
        flat = x.flatten(-2)
        gi, ri = mine.flatten(-2), theirs.flatten(-2)
        valid = (ri >= 0) & (ri < flat.shape[-1]) & self._in_window(bound, theirs, x.shape[-1]).flatten(-2)
        gap = (flat.gather(-1, gi) - flat.gather(-1, torch.where(valid, ri, gi))).abs().double()
        gap = torch.where(valid & ~torch.isnan(gap), gap, torch.inf)
        t, take = _tally(out, gi != ri, gap, limit)
        chosen = torch.where(take, ri, gi)
        t.out = (flat.gather(-1, chosen).view(values.shape), chosen.view(mine.shape))
        return t


@dataclass(frozen=True)
class Clipping(Decision):
    """hardtanh(x, min_val, max_val) (relu6 is hardtanh(x, 0, 6)): element i passes the gradient when
    min_val < x_i < max_val."""

    sides = 1

    @staticmethod
    def _bounds(bound) -> tuple[float, float]:
        return float(bound.get("min_val", -1.0)), float(bound.get("max_val", 1.0))

    def choice(self, bound, out):
        lo, hi = self._bounds(bound)
        return (out > lo) & (out < hi)

    def follow(self, bound, x, out, mine, theirs, limit):
        lo, hi = self._bounds(bound)
        gap = torch.minimum((x - lo).abs(), (x - hi).abs()).double()
        t, take = _tally(out, mine != theirs, torch.where(torch.isnan(gap), torch.inf, gap), limit)
        t.route = (take, theirs)
        return t


def _always(bound: dict) -> bool:
    return True


def _keepdim(bound: dict) -> bool:
    return bool(bound.get("keepdim", False))


_SELECTING = Selecting(1, 0, _always)       # topk, sort: k (or all) indices along dim
_REDUCING = Selecting(1, 0, _keepdim)       # max.dim, min.dim: one index along dim
_ARG = Selecting(None, None, _keepdim)      # argmax, argmin (dim None: over the flattened tensor)

ATEN_OPS: dict[Any, Decision] = {
    aten.topk.default: _SELECTING,
    aten.sort.default: _SELECTING,
    aten.sort.stable: _SELECTING,
    aten.max.dim: _REDUCING,
    aten.min.dim: _REDUCING,
    aten.argmax.default: _ARG,
    aten.argmin.default: _ARG,
    aten.relu.default: Masking(),
    aten.relu_.default: Masking(),
    aten.max_pool2d_with_indices.default: Pooling(),
    aten.hardtanh.default: Clipping(),
    aten.hardtanh_.default: Clipping(),
}

# backward op of a decision whose gradient routing reads a saved input -> the argument that holds it
# (hardtanh_'s backward gets its result: the same storage as its input)
BACKWARD_ROUTES: dict[Any, int] = {aten.hardtanh_backward.default: 1}


# ---- the dynamo side: a function per name that adds the node(s) holding the run's choice --------------

def _getitem(at: int):
    def tap(graph: torch.fx.Graph, node: torch.fx.Node, ex) -> torch.fx.Node | None:
        ok = isinstance(ex, tuple) and len(ex) > at and isinstance(ex[at], torch.Tensor) and ex[at].dtype == torch.int64
        return graph.call_function(operator.getitem, (node, at)) if ok else None
    return tap


def _itself(graph, node, ex):
    return node if isinstance(ex, torch.Tensor) and ex.dtype == torch.int64 else None


def _passes(graph, node, ex):
    return graph.call_function(torch.gt, (node, 0)) if isinstance(ex, torch.Tensor) else None


def _clipped(lo: float, hi: float, named: bool):
    """hardtanh/relu6: the mask of outputs strictly inside the bounds (the bounds from the call where named)."""
    def tap(graph, node, ex):
        if not isinstance(ex, torch.Tensor):
            return None
        a, b = lo, hi
        if named:
            a = node.args[1] if len(node.args) > 1 else node.kwargs.get("min_val", lo)
            b = node.args[2] if len(node.args) > 2 else node.kwargs.get("max_val", hi)
        if not all(isinstance(v, (int, float)) for v in (a, b)):
            return None
        above = graph.call_function(torch.gt, (node, a))
        with graph.inserting_after(above):  # each insert lands right after `node` otherwise: reversed
            below = graph.call_function(torch.lt, (node, b))
        with graph.inserting_after(below):
            return graph.call_function(torch.logical_and, (above, below))
    return tap


def _pool_indices(graph, node, ex):
    if node.kwargs.get("return_indices"):
        return graph.call_function(operator.getitem, (node, 1))
    kwargs = {k: v for k, v in node.kwargs.items() if k != "return_indices"}
    pooled = graph.call_function(F.max_pool2d_with_indices, node.args, kwargs)
    with graph.inserting_after(pooled):
        return graph.call_function(operator.getitem, (pooled, 1))


# function or method name -> adds the node holding the choice (None: not a decision after all)
DYNAMO_TAPS: dict[str, Callable[[torch.fx.Graph, torch.fx.Node, Any], torch.fx.Node | None]] = {
    "topk": _getitem(1), "sort": _getitem(1), "max": _getitem(1), "min": _getitem(1),
    "argsort": _itself, "argmax": _itself, "argmin": _itself,
    "relu": _passes, "relu_": _passes,
    "max_pool2d": _pool_indices, "max_pool2d_with_indices": _getitem(1),
    "hardtanh": _clipped(-1.0, 1.0, True), "hardtanh_": _clipped(-1.0, 1.0, True), "relu6": _clipped(0.0, 6.0, False),
}
# the taps of `Selecting` decisions: a near-tie there moves a whole row (a token routed to another expert),
# not one element
SELECTING_TAPS = frozenset({"topk", "sort", "max", "min", "argsort", "argmax", "argmin"})
