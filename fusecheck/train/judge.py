"""One step judged: each loss and parameter by the check's comparison core, eager's error being its band.

For a quantity q at step t (the loss, or a parameter after the update), compiled's error against the shadow is
judged by `fusecheck.compare.compare` exactly as `check` judges an output, with one change: eager's error
against the golden is the per-metric worst over eager and the K band trajectories (eager run again under
randomised rounding, fusecheck/compare/noise_band.py's `RandomRounding`, from the same weights on the same
data). So the limit is "not worse than a correct eager run is, run to run", measured on this model, this
data and this step; no constant is tuned for training. A row those checks fail is settled (settle.py): judged
as one more run of the band, element by element, since AdamW's sign-like first update makes a few elements
coin tosses 2 lr apart that one number per metric cannot weigh. The distances (relative L2 to the shadow) are what the
report plots; they are read from the same metrics (rmse x sqrt(n)), not computed a second way.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch

from fusecheck.compare import Comparison, compare
from fusecheck.compare.metrics import multi_pair_metrics
from fusecheck.compare.scale import applied_thresholds
from fusecheck.policy import Policy
from fusecheck.check.rows import _worst
from fusecheck.train.settle import settle


@dataclass
class Judged:
    """A quantity's row at one step and its distances to the shadow (L2 of the error, L2 of the shadow)."""

    row: Comparison
    err_l2: dict[str, float]   # "eager", "compiled", "band" (the largest of the band runs) -> ||x - shadow||
    shadow_l2: float

    def distance(self, who: str) -> float:
        return self.err_l2[who] / self.shadow_l2 if self.shadow_l2 else self.err_l2[who]


def _l2(m) -> float:
    return float(m.rmse) * math.sqrt(float(m.numel))


def judge_quantity(name: str, compiled: torch.Tensor, eager: torch.Tensor, shadow: torch.Tensor,
                   band: list[torch.Tensor], policy: Policy) -> Judged:
    shadow = shadow.to(eager.device)
    applied = applied_thresholds(policy, eager.dtype, eager, shadow)
    tol = applied.tolerance
    pairs = {"eager": (eager, shadow), **{f"band{k}": (b.to(eager.device), shadow) for k, b in enumerate(band)}}
    measured = multi_pair_metrics(pairs, ulp_dtype=eager.dtype, rtol=tol.rtol, atol=tol.atol,
                                  small_threshold=applied.small_threshold)
    worst = functools.reduce(_worst, measured.values())
    row = compare(compiled, eager, shadow, policy=policy, name=name, reference_vs_golden=worst)
    settle(row, compiled, eager, shadow, band, policy)
    err = {"eager": _l2(measured["eager"]), "band": max(_l2(m) for m in measured.values()),
           "compiled": _l2(row.vs_golden) if row.vs_golden is not None else math.nan}
    return Judged(row, err, float(shadow.double().norm()))


@dataclass
class StepResult:
    """What one step left: the losses, every quantity's row and distances, the groups' distances."""

    step: int
    losses: dict[str, float]                 # eager, compiled, shadow, band_min, band_max
    judged: dict[str, Judged] = field(default_factory=dict)
    groups: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # "block"/"kind" -> name -> who -> d

    @property
    def failed(self) -> list[str]:
        return [n for n, j in self.judged.items() if not j.row.passed]

    @property
    def errors(self) -> list[str]:
        return [n for n, j in self.judged.items() if j.row.verdict.status.value == "ERROR"]

    def distance(self, names: list[str], who: str) -> float:
        """Relative L2 distance to the shadow over the parameters `names` together."""
        err = math.sqrt(sum(self.judged[n].err_l2[who] ** 2 for n in names))
        ref = math.sqrt(sum(self.judged[n].shadow_l2 ** 2 for n in names))
        return err / ref if ref else err
