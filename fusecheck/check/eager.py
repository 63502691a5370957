"""Stage: eager, twice. The first run is kept (and, with a block recorder, each block's input and output);
the second is kept as digests, so that eager's own nondeterminism is known and absorbed. A target that draws
random numbers in its forward cannot be judged element-wise: refused here."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from fusecheck.check.pipeline import Pipeline
from fusecheck.runs.digest import digest
from fusecheck.errors import TargetError
from fusecheck.runs.execute import RunResult, rng_changed, rng_states
from fusecheck.cli.watchdog import phase


@dataclass
class EagerRuns:
    first: RunResult
    noisy: set[str]                    # results whose repeat run's bits differed
    again: dict[str, torch.Tensor]     # a third run of those, kept in full
    skipped: tuple[str, ...]           # outputs that hold tensors in a form that is not compared


def differing(first: RunResult, again: RunResult, extra: tuple[str, ...] = ()) -> set[str]:
    """Names of the results of `first` (outputs, gradients, `extra` mutated state) whose bits differ in the
    repeat run `again` (kept as digests)."""
    return {k for k, v in first.all(extra).items() if again.digests.get(k) != digest(v)}


def rerun(p: Pipeline, fn, names: set[str], label: str, cotangents, measured: bool = True) -> dict[str, torch.Tensor]:
    """A third run, kept in full for `names` only (results whose repeat digests differed). Every process that
    checks together runs it when one needs it."""
    if not p.agree(bool(names)):
        return {}
    with p.measured(f"{label} repeat") if measured else contextlib.nullcontext():
        again = p.run(fn, cotangents=cotangents)
        return {k: v for k, v in again.all(tuple(again.after)).items() if k in names}


def run_eager(p: Pipeline, recorder=None) -> EagerRuns:
    torch.manual_seed(p.opts.seed)
    phase(f"running {p.name!r} in eager mode")
    model = p.case.model
    with p.measured("eager"):
        try:
            rng_before = rng_states(str(p.device))
            with recorder or contextlib.nullcontext():
                eager = p.run(model, cotangents=None)
            drew = rng_changed(rng_before, rng_states(str(p.device)))
            eager2 = p.run(model, cotangents=eager.cotangents, digests_only=True)
        except Exception as exc:
            if p.passes_through(exc):
                raise
            raise TargetError(f"the target {p.name!r} fails in eager mode: {type(exc).__name__}: {exc}") from exc
    with p.measured("eager"):  # reading the first run's bits is the repeat check's cost: counted with eager
        noisy = differing(eager, eager2, eager.mutated)
    if drew and noisy & set(eager.all()):
        # a forward that reseeds itself (torch.manual_seed inside) also moves the RNG, but repeats itself
        raise TargetError(f"the target {p.name!r} draws random numbers in its forward or backward (the RNG "
                          "advanced during the eager run and two eager runs differ): eager, compiled and golden "
                          "would draw different numbers, so no element-wise verdict is possible. Pass the noise "
                          "in as an input, or turn the random op off (dropout p=0)")
    # Nondeterminism is rare: only then is a run repeated in full, to judge both runs and count elements.
    again = rerun(p, model, noisy, "eager", eager.cotangents)
    return EagerRuns(eager, noisy, again, eager2.skipped)
