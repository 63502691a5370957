"""Stage: the golden, judged row by row as its results arrive. One pass per set of choices to follow
(fusecheck/golden/choices/passes.py); ops with no kernel in the golden dtype fall back one step lower
(golden_fallback.py), and the report names them. How the golden runs (whole copy, streamed, sharded) is the
caller's `golden(sink)`."""
from __future__ import annotations

from typing import Callable

import torch

from fusecheck.check.compiled import CompiledRuns
from fusecheck.check.pipeline import Pipeline
from fusecheck.golden.choices.passes import golden_passes
from fusecheck.errors import GoldenError
from fusecheck.devices import resolve_dtype
from fusecheck.golden.fallback import GoldenFallback, eager_precision
from fusecheck.golden.judging_scope import default_dtype, outside_golden
from fusecheck.cli.watchdog import phase

Sink = Callable[[str, torch.Tensor], None]


def _discard(name: str, t: torch.Tensor) -> None:
    pass


def run_golden(p: Pipeline, judge, compiled: CompiledRuns, golden: Callable[[Sink], None],
               how: str) -> GoldenFallback:
    """Run the golden through every pass; returns the fallback (its notes; the per-block replays use it)."""
    phase(f"running the {p.golden_dtype} golden of {p.name!r} ({how})")
    requested = p.opts.dtype if isinstance(p.opts.dtype, torch.dtype) or p.opts.dtype is None \
        else resolve_dtype(p.opts.dtype)
    fallback = GoldenFallback(p.golden_dtype, run=eager_precision(p.case, requested))
    # rows are judged as the golden produces them: that time is the "judge" phase, not the golden's arithmetic
    judged_before = p.timings.get("judge", 0.0)
    try:
        _golden_passes(p, judge, compiled, golden, how, fallback)
    finally:
        p.carve("judge", "golden", judged_before)
    return fallback


def _golden_passes(p: Pipeline, judge, compiled: CompiledRuns, golden: Callable[[Sink], None], how: str,
                   fallback: GoldenFallback) -> None:
    delivered, base = [0], torch.get_default_dtype()

    def counted(sink: Sink) -> Sink:
        def call(name, t):
            delivered[0] += 1
            return sink(name, t)
        return call
    with p.measured("golden"):
        try:
            try:
                _each_pass(p, judge, compiled, golden, fallback, counted)
            except Exception as exc:
                # the golden with the model's casts kept failed where eager ran (code that gives the kept
                # values another meaning): before any row was judged, run it again with the casts as written
                if p.passes_through(exc) or not fallback.kept or delivered[0]:
                    raise
                fallback.stand_down("the golden", exc)
                _each_pass(p, judge, compiled, golden, fallback, counted)
        except Exception as exc:
            if p.passes_through(exc):
                raise
            if not delivered[0] and _in_default_dtype(p, judge, compiled, golden, fallback, counted, exc, base):
                return
            raise GoldenError(f"the {p.golden_dtype} golden run of {p.name!r} failed where eager ran "
                              f"({how} golden): {type(exc).__name__}: {exc}") from exc


def _in_default_dtype(p: Pipeline, judge, compiled: CompiledRuns, golden: Callable[[Sink], None],
                      fallback: GoldenFallback, counted: Callable[[Sink], Sink], exc: Exception,
                      base: torch.dtype) -> bool:
    """The golden run once more with torch's default dtype set to the golden's, where it failed before any row
    was judged: a model that makes its constants in the default dtype (transformers' XGLM writes
    `torch.full((), torch.finfo(attn_weights.dtype).min)`: fp64's min does not fit the fp32 default) is, written
    for fp64, a model that makes them in fp64. `base`: the caller's default. True when that golden ran (said
    in a note)."""
    if not p.golden_dtype.is_floating_point or p.golden_dtype == base:
        return False
    try:
        with default_dtype(p.golden_dtype):
            _each_pass(p, judge, compiled, golden, fallback, counted)
    except Exception as again:
        if p.passes_through(again):
            raise
        return False
    fallback.default_dtype = p.golden_dtype  # the per-block replays run with it too
    p.notes.append(f"golden: run with torch's default dtype set to {p.golden_dtype} (tensors the model makes "
                   f"without a dtype are {p.golden_dtype} too): with the default {base} it "
                   f"failed where eager ran ({type(exc).__name__}: {str(exc)[:160]})")
    return True


def _each_pass(p: Pipeline, judge, compiled: CompiledRuns, golden: Callable[[Sink], None],
               fallback: GoldenFallback, counted: Callable[[Sink], Sink]) -> None:
    done = 0
    for follower, sink in golden_passes(compiled.eager_choices.calls, compiled.choices, judge,
                                        p.policy.ratios.decision_tie):
        with fallback, follower:
            golden(outside_golden(p.timed("judge", counted(sink))))
        p.notes.extend(follower.report.notes())
        done += 1
    if p.agree(done > 1) and done == 1:  # a peer follows two sets of choices: keep step with it
        with fallback:
            golden(_discard)


def run_blocks(p: Pipeline, recorder, fallback: GoldenFallback, judge_blocks: Callable) -> list:
    """Stage: each block replayed on eager's input to it and judged (diagnostic rows; the verdict is end to end)."""
    if recorder is None or not recorder.calls:
        return []
    phase(f"judging each block of {p.name!r} on eager's input to it")
    with p.measured("blocks"), fallback, default_dtype(fallback.default_dtype or torch.get_default_dtype()):
        return judge_blocks(recorder)
