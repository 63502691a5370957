"""The compiled call on other inputs (the inputs rolled by one), judged like every produced result.

Why: the stale-result probe calls the compiled model once on rolled inputs; a race or a counter-keyed bug
that fires on that call would otherwise escape, since only the first inputs have a golden. Eager runs once
on the same rolled inputs, and each compiled result is compared with eager's as it arrives (nothing kept,
except where a deciding model's two calls chose differently: check/rolled_choices.py).

The rule needs no golden of its own. For any golden g on the rolled inputs, rmse(c - g) >= rmse(c - e) -
rmse(e - g) (the triangle inequality), and eager's error on the same values rolled is estimated by its error
on the first inputs, sigma_e, scaled by how much larger eager's result is there (rounding errors are relative:
a gradient twice as large on the rolled inputs carries twice the rounding; never scaled down). So where rmse(c
- e) > (R + 1) sigma_e (R: the policy's RMSE ratio), compiled is worse than R x eager on that call whatever
the golden there. Two guards keep a correct compile quiet: the bound is at least R x the first call's own
compiled-eager distance (rmse(c1 - e1): the same kernels on the same values), and the elements beyond the
bound must be more than R x as many as on the first call, beyond chance (the Poisson test of the count checks;
counted on power-of-two bins, the same way for both calls), so that a few near-tie flips (a relu at 0), whose
O(1) differences alone can lift an RMSE, never fail a row. A model with discrete decisions is judged against
an eager run that takes compiled's choices at its near-ties wherever the two calls chose differently
(check/rolled_choices.py): a selection (routing) moves whole rows, a relu or max-pool tie moves gradients.
Eager's error on the rolled inputs is an estimate: a gradient with heavier cancellation there is noisier in eager
too (measured: a differential-attention lambda gradient, 32 elements, bf16 on the H100, 10x the first call's
distance). So a FAIL is settled like the golden checks' doubts: eager is run a few times under randomised
rounding on the rolled inputs (`settle_rolled`), and the bound is at least R + 1 times the error those runs show.
What it cannot see: a call wrong on a few elements only, or by less than ~3x eager's RMSE.

Also here: results that ignore their inputs (the compiled call on rolled inputs repeated the first call's
bits while eager's result moved beyond tolerance).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fusecheck.compare import Comparison, Status, Verdict, compare
from fusecheck.compare.family import rmse_ratio
from fusecheck.compare.scale import applied_thresholds
from fusecheck.compare.verdict import _count_significantly_worse
from fusecheck.policy import Policy

CALL = "the compiled call on other inputs (the inputs rolled by one)"


# |c - e| by power of two: bin b holds differences in [2^(b - OFFSET - 1), 2^(b - OFFSET)); bin 0 exact
# agreement, the last bin NaN/Inf where only one side has it
OFFSET, BINS = 1100, 2200
CHUNK = 1 << 24


@dataclass(frozen=True)
class RolledStats:
    """Compiled against eager on the rolled inputs, one result: the RMSE of the finite differences and their
    power-of-two histogram."""
    rmse: float
    hist: torch.Tensor
    numel: int
    eager_rms: float = 0.0  # of eager's finite values: the rolled result's scale


def distance(c: torch.Tensor, e: torch.Tensor) -> RolledStats:
    """rmse(c - e) and the histogram of |c - e|, in fp64, a chunk at a time (no full-size temporary)."""
    hist = torch.zeros(BINS, dtype=torch.int64)
    sq, finite, esq, efinite = 0.0, 0, 0.0, 0
    for cc, ee in zip(c.reshape(-1).split(CHUNK), e.reshape(-1).split(CHUNK)):
        cc, ee = cc.double(), ee.to(cc.device).double()
        same = (cc == ee) | (cc.isnan() & ee.isnan())
        d = torch.where(same, 0.0, (cc - ee).abs())
        ok = d.isfinite()
        sq += float(torch.where(ok, d, 0.0).square().sum())
        finite += int(ok.sum())
        eok = ee.isfinite()
        esq += float(torch.where(eok, ee, 0.0).square().sum())
        efinite += int(eok.sum())
        exp = torch.frexp(torch.where(ok, d, 0.0))[1].long() + OFFSET
        b = torch.where(d == 0, 0, torch.where(ok, exp.clamp(1, BINS - 2), BINS - 1))
        hist += torch.bincount(b, minlength=BINS).cpu()
    return RolledStats((sq / finite) ** 0.5 if finite else 0.0, hist, c.numel(),
                       (esq / efinite) ** 0.5 if efinite else 0.0)


def beyond(hist: torch.Tensor, bound: float) -> int:
    """Elements whose bin lies wholly above `bound` (the NaN/Inf bin included)."""
    if bound <= 0:
        return int(hist[1:].sum())
    first = math.ceil(math.log2(bound)) + 1 + OFFSET  # 2^(b - OFFSET - 1) >= bound
    return int(hist[max(1, min(first, BINS - 1)):].sum())


class RolledScreen:
    """Each compiled result of the rolled call against eager's on the same inputs, as it arrives."""

    def __init__(self, eager: dict[str, torch.Tensor] | None = None, gradients: bool = True, screens: bool = True,
                 follows: bool = False, selects: bool = False):
        # `screens`: False where nothing is screened (eager's call is then needed only for `ignoring_inputs`);
        # `follows`: the model decides, and where compiled's choices differ from eager's on the rolled inputs
        # its results wait in `kept` for an eager run that follows them (check/rolled_choices.py)
        # (`selects`: among its decisions a selection, which moves whole rows, not only a mask)
        self.eager, self.gradients, self.screens, self.follows = eager or {}, gradients, screens, follows
        self.selects = selects
        self.stats: dict[str, RolledStats] = {}
        self.choices = None  # rolled_choices.RolledChoices, set before the rolled call where `follows`
        self.kept: dict[str, torch.Tensor] = {}

    def add(self, name: str, t: torch.Tensor) -> None:
        e = self.eager.get(name) if self.gradients or not name.startswith("grad.") else None
        if not (isinstance(e, torch.Tensor) and isinstance(t, torch.Tensor)) or e.shape != t.shape \
                or e.dtype != t.dtype or not t.is_floating_point() or t.numel() == 0 or t.is_meta:
            return
        if self.choices is not None and self.choices.differ():
            self.kept[name] = t.detach().to("cpu", copy=True)
            return
        self.stats[name] = distance(t, e)

    def drop(self, names) -> None:
        """Results the run could not hand over whole (a gradient accumulated twice): no statistic."""
        for n in names:
            self.stats.pop(n, None)
            self.kept.pop(n, None)


def rolled_doubt(row: Comparison, stats: RolledStats, c1: torch.Tensor, e1: torch.Tensor,
                 policy: Policy) -> RolledDoubt | None:
    """What the rule decides on, where the rolled call is beyond the unscaled bound (None: quiet without the
    first call's histogram, or nothing to judge: no golden, a row that fails already, other shapes); `c1`, `e1`:
    the first call's results, counted against the same bound. `judge_rolled` of it is the FAIL where the rolled
    call is worse than eager whatever its golden (module docstring), kept to be settled (settle_rolled)."""
    first, eager_err = row.vs_reference, row.reference_vs_golden
    if first is None or eager_err is None or not row.passed or c1.shape != e1.shape:
        return None
    r = _ratio(policy, stats.numel)
    if stats.rmse <= max((r + 1) * eager_err.rmse, r * first.rmse):  # the scale and the noise only widen it
        return None
    return RolledDoubt(row.verdict, stats, distance(c1, e1), first.rmse, eager_err.rmse)


def _ratio(policy: Policy, numel: int) -> float:
    ratios = policy.ratios
    return ratios.small_tensor_rmse if numel < ratios.small_tensor_numel else ratios.rmse


@dataclass(frozen=True)
class RolledDoubt:
    """What a rolled-call FAIL was decided on, kept until eager's own noise on the rolled inputs is measured
    (`settle_rolled`): the row's verdict before it, the two calls' distances to eager, the first call's RMSEs."""
    verdict: Verdict
    stats: RolledStats
    before: RolledStats
    first_rmse: float
    eager_rmse: float


def eager_noise(diffs: list[torch.Tensor]) -> float:
    """Eager's error scale on the rolled inputs from K randomised-rounding runs' differences from eager there:
    under the null model (family.py) each is c x eager's own error with c between sqrt 2 and sqrt 3, so the
    largest RMSE over sqrt 2 is the largest eager error the runs are consistent with."""
    return max((float(d.double().square().mean().sqrt()) for d in diffs if d.numel()), default=0.0) / math.sqrt(2)


def judge_rolled(d: RolledDoubt, policy: Policy, noise: float | None = None) -> Verdict | None:
    """The rule on a kept doubt: eager's error on the rolled inputs is estimated from the first inputs (scaled by
    how much larger eager's result is there) and, once measured (`noise`), is at least what eager's own
    randomised-rounding runs on those inputs show: a gradient whose cancellation is worse on the rolled inputs
    is noisier there in eager too, which the first inputs cannot tell."""
    stats, r = d.stats, _ratio(policy, d.stats.numel)
    grow = stats.eager_rms / d.before.eager_rms if d.before.eager_rms > 0 else 1.0
    grow = grow if math.isfinite(grow) and grow > 1 else 1.0
    bound = max((r + 1) * d.eager_rmse, r * d.first_rmse) * grow
    measured = noise is not None and (r + 1) * noise > bound
    bound = max(bound, (r + 1) * noise) if noise is not None else bound
    if stats.rmse <= bound:
        return None
    ours, theirs = beyond(stats.hist, bound), beyond(d.before.hist, bound / grow)
    if not _count_significantly_worse(ours, 0, theirs, r, policy.ratios):
        return None
    return Verdict(Status.FAIL, "rolled_call_worse",
                   f"{CALL} differs from eager's call on the same inputs by RMSE {stats.rmse:.3g}, beyond the bound "
                   f"{bound:.3g} ({r + 1:g}x eager's own RMSE against the golden, {d.eager_rmse:.3g}, and {r:g}x "
                   f"the first call's distance to eager, {d.first_rmse:.3g}"
                   + (f"; x{grow:.3g}, eager's result as much larger there" if grow > 1 else "")
                   + (f"; {r + 1:g}x eager's error there as its randomised-rounding runs measure it, {noise:.3g}"
                      if measured else "")
                   + f"), on {ours} of {stats.numel} elements "
                   f"against {theirs} on the first inputs: on that call compiled is worse than {r:g}x eager "
                   f"whatever the golden there")


ROLLED_NOISE_RUNS = 4  # randomised-rounding eager runs on the rolled inputs, only for rows the rule failed


def settle_rolled(doubts: dict[str, RolledDoubt], rows: dict, policy: Policy, measure) -> list[str]:
    """Rows the rolled call's rule failed on an estimate of eager's error there, judged again with eager's
    noise on the rolled inputs measured (`measure(names)`: a Spread with each run's difference, `diffs`).
    Returns the report's notes; the doubts are consumed."""
    if not doubts:
        return []
    spread = measure(sorted(doubts))
    cleared = []
    for name, d in doubts.items():
        row, diffs = rows.get(name), spread.diffs.get(name)
        if row is None or not diffs:
            continue  # nothing measured: the FAIL stands
        noise = eager_noise(diffs)
        verdict = judge_rolled(d, policy, noise)
        if verdict is None:
            row.verdict = d.verdict
            row.notes.append(f"{CALL}: its distance to eager's call, RMSE {d.stats.rmse:.3g}, is within "
                             f"eager's own noise there ({len(diffs)} randomised-rounding eager runs: error "
                             f"~{noise:.3g})")
            cleared.append(name)
        else:
            row.verdict = verdict
    n = len(doubts)
    doubts.clear()
    return [f"{CALL}: {n} row(s) beyond the bound estimated from the first inputs were judged again against "
            f"{spread.runs} randomised-rounding eager runs on the rolled inputs: {len(cleared)} within eager's "
            f"own noise there, {n - len(cleared)} still worse"]


@dataclass(frozen=True)
class Ignoring:
    """A compiled result unchanged on the rolled inputs where eager's moved: what its FAIL says, and eager's
    largest move between the two calls (`within_eager_noise` weighs it once the golden is known)."""

    message: str
    move: float


def within_eager_noise(ignoring: Ignoring, eager_error, policy: Policy) -> bool:
    """Eager's move between the calls is within the RMSE check's ratio (3 below its small-tensor size, 2 above) times
    its own largest error against the golden on the first inputs (`eager_error`: that row's metrics): two of
    eager's errors span that much with the exact result unchanged (a sum the roll only reorders, its cancellation
    deciding eager's last bits: MobileNetV2 batch-norm gradients of 8 elements, bf16 --train, moved on 1 of 8), so
    unchanged bits are no evidence of a cache."""
    return eager_error is not None and ignoring.move <= rmse_ratio(policy, eager_error.numel) * eager_error.max_abs


def ignoring_inputs(policy: Policy, eager_first: dict, eager_rolled: dict, unchanged: set[str],
                    compiled_first: dict | None = None) -> dict[str, Ignoring]:
    """Results whose compiled call on the rolled inputs gave the first call's very bits while eager's result
    moved beyond the policy's tolerance between the same two inputs: an artifact that returns its first result
    forever (a cache keyed on nothing) is right on every call the golden judges, and only this tells. A result
    the roll does not change (a max over the rolled dimension, a mean that moves by rounding) keeps eager
    within tolerance and is not named. Nor is one whose bits (`compiled_first`, the same as the rolled call's)
    are at least as close to eager's rolled result as to eager's first on the elements where eager moved
    (`_closer_to_rolled`): eager may move by a choice at a near-tie that the exact result does not make (a
    bf16 max over a sequence whose order the roll changed: found by a red team, 2026-12-07), while a result
    cached from the first call is close to eager's first result there and far from its rolled one. Where the
    model decides, `eager_rolled` follows compiled's choices at ties (rolled_choices.judge_kept)."""
    out = {}
    for k in sorted(unchanged):
        e1, e2 = eager_first.get(k), eager_rolled.get(k)
        c = (compiled_first or {}).get(k)
        if not (isinstance(e1, torch.Tensor) and isinstance(e2, torch.Tensor)) or e1.shape != e2.shape \
                or e1.dtype != e2.dtype or getattr(c, "is_meta", False):  # no bits to read: its row says so
            continue
        row = compare(e2.to(e1.device), e1, policy=policy, name=k)
        if row.vs_reference is not None and row.vs_reference.mismatches > 0 \
                and not _closer_to_rolled(policy, c, e1, e2):
            out[k] = Ignoring(f"{CALL} returned the first call's very bits, while eager's result moved beyond "
                              f"tolerance ({int(row.vs_reference.mismatches)} of {e1.numel()} elements, by up to "
                              f"{row.vs_reference.max_abs:.3g}): the compiled artifact ignores its inputs (a result "
                              "cache keyed on nothing, an output buffer never rewritten)",
                              float(row.vs_reference.max_abs))
    return out


def _closer_to_rolled(policy: Policy, c, e1: torch.Tensor, e2: torch.Tensor) -> bool:
    """Compiled's unchanged result `c` is at least as close to eager's rolled result as to its first on the
    elements where eager moved beyond tolerance (ignoring_inputs): counted element by element, so that a cache
    of the first call is named on any size, even where compiled already differed from eager elsewhere."""
    if not isinstance(c, torch.Tensor) or c.shape != e1.shape or c.dtype != e1.dtype:
        return False
    a, b, x = e1.double(), e2.to(e1.device).double(), c.to(e1.device).double()
    tol = applied_thresholds(policy, e1.dtype, e1, None).tolerance  # as `compare(e2, e1)` counted them
    moved = (a - b).abs() > tol.atol + tol.rtol * a.abs()  # NaN compares False
    to_first, to_rolled = (x - a).abs()[moved], (x - b).abs()[moved]
    closer_rolled, closer_first = int((to_rolled < to_first).sum()), int((to_first < to_rolled).sum())
    return closer_rolled > 0 and closer_rolled >= closer_first
