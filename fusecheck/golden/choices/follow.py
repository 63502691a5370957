"""Eager's choices recorded at dispatch, and the golden made to follow a run's choices at near-ties.

`Recorder` keeps, per decision call of the eager run, its input and what it chose. `Follower` runs
under the golden: at the i-th decision call it compares the golden's choice with the run's, and where they
differ it takes the run's choice on the rows where the two are tied: the golden's values of the two choices
differ by at most `sides x tie x E` (for a relu: the golden's input is that close to 0), E being eager's
largest error at that decision's input. Why that bound: a run whose input is off by at most e per element
can swap two choices whose values differ by up to 2e (one up, one down: `sides` 2), or move one value across
0 from up to e away (`sides` 1); a correct eager reaches e = E, and compiled may be `tie` times noisier (the
policy's `ratios.decision_tie`, the RMSE ratio by default). A row beyond it, or an index out of range (or
outside its pooling window), keeps the golden's choice: a wrong choice is then a large error, and fails.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fusecheck.golden.choices.ops import ATEN_OPS, BACKWARD_ROUTES, bound_args
from fusecheck.runs.digest import digest


@dataclass
class Call:
    op: str
    input: torch.Tensor | None  # eager's input to the decision (None: a Recorder that keeps choices only)
    choice: torch.Tensor     # what it chose: indices, or a relu's mask


def _saved(t: torch.Tensor) -> tuple:
    """What identifies a tensor autograd saved for a backward: its storage address and shape (it stays
    alive, so no other tensor takes that address meanwhile)."""
    return t.data_ptr(), tuple(t.shape)


def _input(func, args) -> torch.Tensor:
    """The decision's input as it was before the call (an in-place relu_ overwrites it)."""
    return args[0].detach().clone() if func._schema.is_mutable else args[0]


class Recorder(TorchDispatchMode):
    """Records every decision of the run it wraps (eager), in call order."""

    supports_higher_order_operators = True

    def __init__(self, inputs: bool = True):
        super().__init__()
        self.calls: list[Call] = []
        self.inputs = inputs  # False: the choices only (no copy of each decision's input is kept)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        spec = ATEN_OPS.get(func)
        if spec is None or not isinstance(args[0], torch.Tensor) or torch._C._current_graph_task_id() != -1:
            return func(*args, **kwargs)
        # stored, and taken before an in-place relu_ overwrites it
        x = args[0].detach().clone() if self.inputs else None
        out = func(*args, **kwargs)
        choice = spec.choice(bound_args(func, args, kwargs), out).detach().clone()
        self.calls.append(Call(func.overloadpacket.__name__, x, choice))
        return out


@dataclass
class Followed:
    """What one golden pass did at the decisions of one run."""

    run: str
    followed_rows: int = 0
    followed_calls: set[int] = field(default_factory=set)
    largest_gap: float = 0.0      # golden's gap between the two choices, over the followed rows
    its_limit: float = 0.0
    refused_rows: int = 0          # rows where the run chose differently beyond the bound
    refused_calls: set[int] = field(default_factory=set)
    smallest_refused: float = float("inf")  # gap / limit over the refused rows
    misaligned: str | None = None

    def add(self, i: int, t, limit: float) -> None:
        if t.taken:
            self.followed_rows += t.taken
            self.followed_calls.add(i)
            self.largest_gap = max(self.largest_gap, t.largest_gap)
            self.its_limit = max(self.its_limit, limit)
        if t.refused:
            self.refused_rows += t.refused
            self.refused_calls.add(i)
            self.smallest_refused = min(self.smallest_refused, t.smallest_refused)

    def notes(self) -> list[str]:
        out = []
        if self.misaligned:
            out.append(f"decisions: {self.run}'s choices could not be lined up with the golden's "
                       f"({self.misaligned}); the golden kept its own")
        if self.followed_rows:
            out.append(f"decisions: {self.run} chose differently from the fp64 golden at {self.followed_rows} "
                       f"near-tied row(s) of {len(self.followed_calls)} decision(s) (topk/sort/argmax/relu/hardtanh/max-pool; "
                       f"largest golden gap {self.largest_gap:.3g}, within its limit {self.its_limit:.3g}: "
                       "ratios.decision_tie x eager's largest error at that input, x2 where two values swap): "
                       f"{self.run} is judged against a golden that takes the same choices")
        if self.refused_rows:
            out.append(f"decisions: {self.run} chose differently from the golden at {self.refused_rows} row(s) of "
                       f"{len(self.refused_calls)} decision(s) where the choices are not tied "
                       f"(gap {self.smallest_refused:.3g}x its limit or more): the golden keeps its own choice there")
        return out


class Follower(TorchDispatchMode):
    """Under the golden: take `targets[i]` (the run's choice at its i-th decision) at near-tied rows."""

    supports_higher_order_operators = True

    def __init__(self, run: str, targets: list[torch.Tensor], eager: list[Call], tie: float,
                 noise: dict[int, float] | None = None):
        super().__init__()
        self.targets, self.eager, self.tie = targets, eager, tie
        # E per decision: measured here, or given by the pass whose golden followed eager (a golden that
        # followed compiled has moved away from eager's input on the rows it followed, downstream of them)
        self.noise: dict[int, float] = dict(noise or {})
        self.i = 0
        self.report = Followed(run)
        self._made: dict = {}  # (op, input digest) -> what the forward returned, for a checkpoint's recompute
        self._route_made: dict = {}  # (op, input digest) -> Taken.route, for the same recompute
        self._routes: dict = {}  # the saved input's (data_ptr, shape) -> Taken.route, read by its backward

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in BACKWARD_ROUTES:
            return self._rerouted(func, args, kwargs)
        spec = ATEN_OPS.get(func)
        if spec is None or not isinstance(args[0], torch.Tensor) or self.report.misaligned:
            return func(*args, **kwargs)
        x = _input(func, args)
        key = (func, digest(x))
        out = func(*args, **kwargs)
        if torch._C._current_graph_task_id() != -1:
            # a streamed golden recomputes each piece's forward during backward: the same choices again
            self._route(key, args[0])
            return self._returned(func, args, self._made.get(key, out))
        i, self.i = self.i, self.i + 1
        self._made[key] = made = self._decide(i, func, spec, x, args, kwargs, out)
        self._route(key, args[0])
        return self._returned(func, args, made)

    def _route(self, key, saved: torch.Tensor) -> None:
        """Where the backward of this call will find its rerouting, if any; an address a freed tensor had
        is cleared, so that a later call's backward never reads a stale one."""
        if key in self._route_made:
            self._routes[_saved(saved)] = self._route_made[key]
        else:
            self._routes.pop(_saved(saved), None)

    def _rerouted(self, func, args, kwargs):
        """A decision's backward that reads its saved input (hardtanh's): the gradient passes where the run
        chose on the rows the golden took, as the golden's own choice elsewhere."""
        out = func(*args, **kwargs)
        route = self._routes.pop(_saved(args[BACKWARD_ROUTES[func]]), None)  # one backward per forward call
        if route is None:
            return out
        taken, theirs = (t.to(out.device) for t in route)
        grad = args[0]
        return torch.where(taken, torch.where(theirs, grad, torch.zeros_like(grad)), out)

    @staticmethod
    def _returned(func, args, out):
        """An in-place decision (relu_) returns its input, overwritten with what was decided."""
        if func._schema.is_mutable and out is not args[0]:
            args[0].copy_(out)
            return args[0]
        return out

    def _decide(self, i, func, spec, x, args, kwargs, out):
        bound = bound_args(func, args, kwargs)
        mine = spec.choice(bound, out)
        if i >= len(self.targets) or i >= len(self.eager):
            self.report.misaligned = f"the golden made more decisions ({i + 1}+) than recorded"
            return out
        theirs, eager = self.targets[i].to(mine.device), self.eager[i]
        if theirs.shape != mine.shape or eager.input.shape != x.shape:
            self.report.misaligned = f"decision {i}: shapes {tuple(theirs.shape)} vs {tuple(mine.shape)}"
            return out
        if i not in self.noise:
            err = (eager.input.to(x.device, x.dtype) - x).abs().double()
            self.noise[i] = float(err.nan_to_num(nan=0.0, posinf=0.0).max()) if err.numel() else 0.0
        if self.tie <= 0 or torch.equal(theirs, mine):
            return out
        limit = spec.sides * self.tie * self.noise[i]
        if isinstance(out, torch.Tensor) and func._schema.is_mutable:
            out = out.clone()  # `x` for the gap is the input before the call; the result is rewritten below
        taken = spec.follow(bound, x, out, mine, theirs, limit)
        self.report.add(i, taken, limit)
        if taken.route is not None and taken.taken:
            self._route_made[(func, digest(x))] = taken.route
        return taken.out
