"""Eager's choices recorded at dispatch, and the golden made to follow a run's choices at near-ties.

`Recorder` keeps, per decision call of the eager run, its input and the indices chosen. `Follower` runs
under the golden: at the i-th decision call it compares the golden's choice with the run's, and where they
differ it takes the run's choice on the rows (all positions but the decided dim) where the golden's values
of the two choices differ by at most `2 x tie x E`, E being eager's largest error at that decision's input.
Why that bound: a run whose input is off by at most e per element can swap two choices whose values differ
by up to 2e (one up, one down); a correct eager reaches e = E, and compiled may be `tie` times noisier (the
policy's `ratios.decision_tie`, the RMSE ratio by default). A row beyond it, or an index out of range, keeps
the golden's choice: a wrong choice is then a large error, and fails.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fusecheck.decisions.ops import ATEN_OPS, DecisionOp, bound_args
from fusecheck.digest import digest


@dataclass
class Call:
    op: str
    input: torch.Tensor      # eager's input to the decision (recorded only for eager)
    indices: torch.Tensor


class Recorder(TorchDispatchMode):
    """Records every decision of the run it wraps (eager), in call order."""

    supports_higher_order_operators = True

    def __init__(self):
        super().__init__()
        self.calls: list[Call] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        spec = ATEN_OPS.get(func)
        if spec is not None and isinstance(args[0], torch.Tensor) and torch._C._current_graph_task_id() == -1:
            self.calls.append(Call(func.overloadpacket.__name__, args[0].detach().clone(),
                                   spec.indices(out).detach().clone()))
        return out


def _decided_view(x: torch.Tensor, idx: torch.Tensor, spec: DecisionOp, bound: dict):
    """(input, indices, dim) with the indices shaped for `gather` along dim; dim None: over the flattened input."""
    dim = spec.dim(bound)
    if dim is None:
        return x.reshape(-1), idx.reshape(1), 0
    dim = dim % max(x.dim(), 1)
    return x, (idx if spec.keeps_dim(bound) else idx.unsqueeze(dim)), dim


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

    def notes(self) -> list[str]:
        out = []
        if self.misaligned:
            out.append(f"decisions: {self.run}'s choices could not be lined up with the golden's ({self.misaligned}); "
                       "the golden kept its own")
        if self.followed_rows:
            out.append(f"decisions: {self.run} chose differently from the fp64 golden at {self.followed_rows} near-tied "
                       f"row(s) of {len(self.followed_calls)} decision(s) (topk/sort/argmax; largest golden gap "
                       f"{self.largest_gap:.3g}, within its limit {self.its_limit:.3g} = 2 x ratios.decision_tie x "
                       f"eager's largest error at that input): {self.run} is judged against a golden that takes the same choices")
        if self.refused_rows:
            out.append(f"decisions: {self.run} chose differently from the golden at {self.refused_rows} row(s) of "
                       f"{len(self.refused_calls)} decision(s) where the choices are not tied (gap {self.smallest_refused:.3g}x "
                       "its limit or more): the golden keeps its own choice there")
        return out


class Follower(TorchDispatchMode):
    """Under the golden: take `targets[i]` (the run's indices at its i-th decision) at near-tied rows."""

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

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        spec = ATEN_OPS.get(func)
        if spec is None or not isinstance(args[0], torch.Tensor) or self.report.misaligned:
            return out
        key = (func, digest(args[0]))
        if torch._C._current_graph_task_id() != -1:
            # a streamed golden recomputes each piece's forward during backward: the same choices again
            return self._made.get(key, out)
        i, self.i = self.i, self.i + 1
        self._made[key] = out = self._decide(i, func, spec, args, kwargs, out)
        return out

    def _decide(self, i, func, spec, args, kwargs, out):
        mine = spec.indices(out)
        if i >= len(self.targets) or i >= len(self.eager):
            self.report.misaligned = f"the golden made more decisions ({i + 1}+) than recorded"
            return out
        theirs, eager = self.targets[i].to(mine.device), self.eager[i]
        if theirs.shape != mine.shape or eager.input.shape != args[0].shape:
            self.report.misaligned = f"decision {i}: shapes {tuple(theirs.shape)} vs {tuple(mine.shape)}"
            return out
        if i not in self.noise:
            err = (eager.input.to(args[0].device, args[0].dtype) - args[0]).abs().double()
            self.noise[i] = float(err.nan_to_num(nan=0.0, posinf=0.0).max()) if err.numel() else 0.0
        if self.tie <= 0 or torch.equal(theirs, mine):
            return out
        return self._follow(i, spec, bound_args(func, args, kwargs), args[0], out, mine, theirs)

    def _follow(self, i, spec: DecisionOp, bound, x, out, mine, theirs):
        xv, gi, dim = _decided_view(x, mine, spec, bound)
        _, ri, _ = _decided_view(x, theirs, spec, bound)
        valid = (ri >= 0) & (ri < xv.shape[dim])
        gap = (xv.gather(dim, gi) - xv.gather(dim, torch.where(valid, ri, gi))).abs().double()
        gap = torch.where(valid & ~torch.isnan(gap), gap, torch.inf)
        limit = 2 * self.tie * self.noise[i]
        differs = (gi != ri).any(dim, keepdim=True)
        row_gap = gap.amax(dim, keepdim=True)
        take = differs & (row_gap <= limit)
        refused = differs & ~take
        rep = self.report
        if bool(take.any()):
            rep.followed_rows += int(take.sum())
            rep.followed_calls.add(i)
            rep.largest_gap = max(rep.largest_gap, float(row_gap[take].max()))
            rep.its_limit = max(rep.its_limit, limit)
        if bool(refused.any()):
            rep.refused_rows += int(refused.sum())
            rep.refused_calls.add(i)
            rep.smallest_refused = min(rep.smallest_refused, float(row_gap[refused].min()) / max(limit, 1e-300))
        chosen = torch.where(take, ri, gi)
        new_indices = chosen.reshape(mine.shape)
        if spec.indices_at is None:
            return new_indices
        res = list(out)
        res[spec.indices_at] = new_indices
        if spec.values_at is not None:
            res[spec.values_at] = xv.gather(dim, chosen).reshape(out[spec.values_at].shape)
        return tuple(res)
