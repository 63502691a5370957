"""Stage: the last rows judged (results the golden did not produce, against eager alone), rows only the
per-element checks failed settled by eager's noise band, and the notes every check gives."""
from __future__ import annotations

from typing import Callable

import torch

from fusecheck.check.compiled import CompiledRuns
from fusecheck.check.eager import EagerRuns
from fusecheck.check.pipeline import Pipeline
from fusecheck.compare import Comparison, Status, Verdict, input_error
from fusecheck.golden.choices.tap import decision_nodes
from fusecheck.check.precision_notes import eager_precision_notes
from fusecheck.check.rows import RowJudge
from fusecheck.cli.watchdog import phase


def row_judge(p: Pipeline, eager: EagerRuns, compiled: CompiledRuns, *, keep_doubts: bool = True) -> RowJudge:
    """In-place updates of inputs or buffers are results too: judged like outputs when eager or compiled made any."""
    mutated = mutated_keys(eager, compiled)
    one_sided = sorted(set(eager.first.after) ^ set(compiled.first.after))
    if one_sided:
        p.notes.append(f"not judged: {', '.join(k.removeprefix('mutated.') for k in one_sided)}: module state only "
                       "one of eager and compiled left (the model takes another path under torch.compile, "
                       "e.g. `if not torch.compiler.is_compiling()`)")
    return RowJudge(eager.first.all(mutated), compiled.first.all(mutated), p.policy,
                    exact=compiled.capture.movement_only, eager_noisy=eager.noisy, compiled_noisy=compiled.noisy,
                    eager_again=eager.again, compiled_again=compiled.again, again_call=compiled.again_call,
                    ignores_inputs=compiled.ignores_inputs, rolled=compiled.rolled,
                    keep_doubts=keep_doubts,
                    parked=compiled.parked)


def mutated_keys(eager: EagerRuns, compiled: CompiledRuns) -> tuple[str, ...]:
    """What eager or compiled changed, among the inputs and module state both runs left."""
    both = set(eager.first.after) & set(compiled.first.after)
    return tuple(sorted((set(eager.first.mutated) | set(compiled.first.mutated)) & both))


def capture_notes(p: Pipeline, compiled: CompiledRuns) -> list[str]:
    capture = compiled.capture
    if p.backend.user and any(decision_nodes(g.gm) for g in capture.graphs):
        return ["decisions: a user backend receives the model's own graph (no decision taps), so where "
                "it takes a discrete decision (topk, relu, max-pool...) at a near-tie the golden keeps its own"]
    return []


def run_notes(p: Pipeline, eager: EagerRuns, compiled: CompiledRuns, mutated: tuple[str, ...],
              run_dtype: torch.dtype | None) -> list[str]:
    """What the report says about how the runs went (graphs, data movement, mutation, precision)."""
    notes = eager_precision_notes(p.device.type, run_dtype)
    if p.golden_dtype != torch.float64:
        notes.append(f"golden runs in {p.golden_dtype} on {p.device.type}: the device has no fp64")
    if eager.skipped:
        notes.append(f"not compared: {', '.join(eager.skipped)}: neither tensors, numbers, pytree containers nor "
                     "dataclasses; return tensors or numbers to have them judged")
    graphs = compiled.capture.graphs  # none: the compiled stage has refused already (nothing compiled to judge)
    if len(graphs) > 1:
        notes.append(f"{len(graphs)} graphs captured (graph breaks"
                     f"{'; one per block with --regional' if p.opts.regional else ''})")
    if compiled.capture.movement_only:
        notes.append("every captured graph is pure data movement: forward outputs must be bitwise equal to eager")
    if mutated:
        notes.append(f"the model mutates {', '.join(k.removeprefix('mutated.') for k in mutated)}: "
                     "the values after the call are judged too")
    return notes


def finish(p: Pipeline, judge: RowJudge, eager_keys: list[str], compiled_keys: set[str],
           settle: Callable[[RowJudge], list[str]] | None = None) -> list[Comparison]:
    """Every remaining row judged without a golden, doubts settled (`settle`, where it can run), rows in
    eager's order; a result only compiled produced is an error row."""
    phase(f"comparing the outputs of {p.name!r}")
    with p.measured("compare"):
        for name in list(judge.eager):
            judge.judge(name, None)
    if (judge.doubtful or judge.rolled_doubts) and settle is not None:
        p.notes.extend(settle(judge))
    rows = [judge.rows[name] for name in eager_keys if name in judge.rows]
    for name in sorted(compiled_keys - set(eager_keys)):
        rows.append(input_error(name, "structure_mismatch", f"compiled produced {name}, eager did not"))
    return empty_beside_judged(rows)


def empty_beside_judged(rows: list[Comparison]) -> list[Comparison]:
    """An empty result (an empty cache, a zero-width slice) beside results that were judged: its shape and dtype
    matched eager's (else it failed before), and there is no element to compare, so it passes, said so. Only
    when nothing else was judged is emptiness an error (exit 2): a check must judge something."""
    if not any(r.verdict.code != "empty" and r.verdict.status is not Status.ERROR for r in rows):
        return rows
    for r in rows:
        if r.verdict.code == "empty":
            r.verdict = Verdict(Status.PASS, "empty_equal", "no elements: compiled and eager are empty with the same "
                                f"shape {tuple(r.shape)} and dtype; the other results were judged")
    return rows
