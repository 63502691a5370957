"""The rolled call of a model that decides (top-k routing, sort, argmax; with --train also relu, clipping and
max-pool masks), judged against eager on the same inputs with eager taking compiled's choices at near-ties.

Why: on the rolled inputs there is no golden, and a near-tie that compiled resolves one way and eager the
other moves a routed row (or a relu's gradient) by O(1). Comparing the two as they are would fail a correct
compile; judging only their bits let a race on that call pass. So:
1. eager's rolled run records its choices (`Recorder`); the compiled call's are read from its taps;
2. where they are the same everywhere (the common case), every result is screened as it arrives
   (check/rolled.py), as for a model without decisions;
3. where they differ, the compiled results wait on the host, and eager runs again following compiled's
   choices at near-tied rows (`Follower`, as the golden follows them on the first inputs). A row is near-tied
   where eager's two values differ by at most `sides x decision_tie x E`, E being eager's largest error at
   that decision's input. With no golden there, E is measured by a few eager runs under randomised rounding
   with every decision pinned to eager's own choice (so E is rounding noise, never a routing change): the
   largest difference between their decision inputs and eager's. Not divided by the randomised runs' factor
   over eager's own error (sqrt 2 to sqrt 3): a larger E follows more ties, and a value wrong downstream of a
   followed choice is still in the screened results. A choice beyond it stays eager's: an O(1) difference
   that the screen counts.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable

import torch

from fusecheck.check.rolled import CALL, RolledStats, distance
from fusecheck.compare.noise_band.rounding import RandomRounding
from fusecheck.compare.noise_band.spread import perturbed_run_seed
from fusecheck.golden.choices.follow import Call, Follower, Recorder
from fusecheck.golden.choices.passes import same_choices

NOISE_RUNS = 2  # randomised-rounding eager runs that measure E, only where the choices differ


@dataclass
class RolledChoices:
    """Eager's and compiled's choices on the rolled inputs: `compiled` is the capture's live list of tapped
    choices, of which the rolled call's start at `mark`."""
    eager: list[torch.Tensor]
    compiled: list[torch.Tensor]
    mark: int
    _differ: bool | None = field(default=None, repr=False)

    def differ(self) -> bool:
        """Read once, at the rolled call's first result (its forward, with every tap, has run by then)."""
        if self._differ is None:
            self._differ = not same_choices(self.eager, self.compiled[self.mark:])
        return self._differ

    def theirs(self) -> list[torch.Tensor]:
        return list(self.compiled[self.mark:])


def recorded(run: Callable[[], dict]) -> tuple[dict, list[torch.Tensor]]:
    """Eager's rolled results and its choices at each decision, in call order (no copy of their inputs)."""
    rec = Recorder(inputs=False)
    with rec:
        out = run()
    return out, [c.choice for c in rec.calls]


def decision_noise(run: Callable[[], dict], seed: int, runs: int = NOISE_RUNS) -> tuple[list[Call], dict[int, float]] | None:
    """Eager's decisions on the rolled inputs (inputs and choices) and E per decision: the largest |input of a
    randomised-rounding run - eager's input| over `runs` runs, every decision pinned to eager's choice.
    None where the runs cannot be lined up with eager's (a decision more or less). Always 1 + `runs` runs (a
    sharded peer makes as many)."""
    ref_mode, ref = RandomRounding(seed, perturb=False, record=True, decompose=False), Recorder()
    with ref_mode, ref:
        run()
    noise: dict[int, float] = {i: 0.0 for i in range(len(ref.calls))}
    broken = False
    for k in range(runs):
        mode = RandomRounding(perturbed_run_seed(seed, k), replay=ref_mode.recording, decompose=False)
        rec = Recorder()
        with mode, rec:
            run()
        broken = broken or bool(mode.replay_broken) or len(rec.calls) != len(ref.calls)
        for i, (a, b) in enumerate(zip(ref.calls, rec.calls) if not broken else ()):
            if a.input.shape != b.input.shape:
                broken = True
                break
            noise[i] = max(noise[i], _largest_difference(a.input, b.input))
        del rec
    return None if broken else (ref.calls, noise)


def _largest_difference(a: torch.Tensor, b: torch.Tensor, chunk: int = 1 << 22) -> float:
    """max |a - b| over the finite differences, in fp32, a chunk at a time (a relu's input is activation-sized)."""
    out = 0.0
    for x, y in zip(a.reshape(-1).split(chunk), b.reshape(-1).to(a.device).split(chunk)):
        d = (x.float() - y.float()).abs().nan_to_num(0.0, 0.0, 0.0)
        out = max(out, float(d.max()) if d.numel() else 0.0)
    return out


def judge_kept(kept: dict[str, torch.Tensor], theirs: list[torch.Tensor], run: Callable[[], dict], *,
               tie: float, seed: int, notes: list[str], selects: bool = True,
               reference: dict | None = None) -> dict[str, RolledStats]:
    """The kept compiled results of the rolled call against eager following compiled's choices at near-ties
    (module docstring). Returns each result's statistic. Where the choices cannot be lined up (a decision
    outside the compiled graphs), a model that only masks (`selects` False: relu, clipping, max-pool, whose
    forward values are continuous at a tie) has its outputs judged against eager as it is, and its gradients
    by their bits only; a selecting model, every result by its bits only; said in `notes`. Every call makes
    the same 2 + NOISE_RUNS eager runs, with nothing kept too (a sharded peer's choices differed).
    `reference`: eager's rolled results that are read later (`rolled.ignoring_inputs`); each is replaced by
    the run the rolled call is judged against here, which took compiled's choices at the ties."""
    measured = decision_noise(run, seed)
    follower = Follower(CALL, theirs, measured[0], tie, noise=measured[1]) if measured is not None else None
    with follower if follower is not None else contextlib.nullcontext():
        followed = _refreshing(run(), reference)
    if not kept:
        return {}
    if follower is None:
        return _unaligned(kept, followed, selects, notes,
                          "eager's randomised-rounding runs there could not be lined up with its own decisions")
    done = follower.report
    if done.misaligned:
        return _unaligned(kept, followed, selects, notes, f"its choices could not be lined up with eager's "
                                                          f"({done.misaligned})")
    notes.append(f"{CALL} chose differently from eager at {done.followed_rows + done.refused_rows} row(s) of "
                 f"{len(done.followed_calls | done.refused_calls)} decision(s); eager was run again taking "
                 f"compiled's choice at the {done.followed_rows} near-tied one(s) (largest gap {done.largest_gap:.3g}, "
                 f"within {done.its_limit:.3g}: decision_tie x eager's largest error there, measured by "
                 f"{NOISE_RUNS} randomised-rounding runs)"
                 + (f"; at {done.refused_rows} row(s) the choices are not tied and eager keeps its own"
                    if done.refused_rows else "")
                 + ", and every result of that call is judged against that run")
    return _against(kept, followed, notes)


def _refreshing(eager: dict, reference: dict | None) -> dict:
    for k in list(reference or ()):
        if k in eager:
            reference[k] = eager[k]
    return eager


def _against(kept: dict[str, torch.Tensor], eager: dict, notes: list[str]) -> dict[str, RolledStats]:
    out = {}
    for name, t in kept.items():
        e = eager.get(name)
        if isinstance(e, torch.Tensor) and e.shape == t.shape and e.dtype == t.dtype:
            out[name] = distance(t, e)
    lost = sorted(set(kept) - set(out))
    if lost:
        notes.append(f"{CALL}: eager's run there gave no result of the same shape and dtype for {', '.join(lost[:3])}"
                     + (f" and {len(lost) - 3} more" if len(lost) > 3 else "") + ": judged by their bits only")
    return out


def _unaligned(kept: dict[str, torch.Tensor], eager: dict, selects: bool, notes: list[str],
               why: str) -> dict[str, RolledStats]:
    """Nothing to follow: a selection moves whole rows (bits only); a mask moves gradients only (outputs judged
    against eager as it is)."""
    outputs = {} if selects else {k: t for k, t in kept.items() if not k.startswith("grad.")}
    notes.append(f"{CALL} chose differently from eager and {why}: "
                 + ("its results are judged by their bits only" if selects else
                    "its outputs are judged against eager as it is, its gradients by their bits only"))
    return _against(outputs, eager, notes)
