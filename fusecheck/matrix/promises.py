"""The checks behind each promise (names and meanings: fusecheck/toggles/promises.py). A check reads the row's
check report, or runs the compiled model once more (batch invariance), and answers None (kept), or
("broken" | "unverified", why). A broken promise FAILs the row even when its numbers are not worse.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from fusecheck.toggles.promises import BATCH_INVARIANT, BITWISE_EAGER, NOT_WORSE, RUN_TO_RUN

from .rows import MatrixRow

BROKEN, UNVERIFIED = "broken", "unverified"


@dataclass
class RowContext:
    """What a check may need beyond the report: the case and the options the matrix ran it with."""
    case: Any
    kwargs: dict[str, Any] = field(default_factory=dict)


def _not_worse(row: MatrixRow, ctx: RowContext) -> Any:
    return None  # the check's own verdict is this promise


def _bitwise_eager(row: MatrixRow, ctx: RowContext) -> Any:
    rows = [c for c in row.report.rows if c.vs_reference is not None]
    differ = [(c.name, int(c.vs_reference.numel - c.vs_reference.bitwise_equal), int(c.vs_reference.numel)) for c in rows
              if c.vs_reference.bitwise_equal >= 0 and c.vs_reference.bitwise_equal != c.vs_reference.numel]
    if differ:
        shown = ", ".join(f"{n}: {d}/{t} elements" for n, d, t in differ[:3])
        return BROKEN, (f"{len(differ)} of {len(rows)} outputs/gradients are not bitwise equal to eager ({shown}"
                        f"{', ...' if len(differ) > 3 else ''})")
    if len(rows) != len(row.report.rows):
        return UNVERIFIED, "some outputs could not be compared with eager"
    return None


def _run_to_run(row: MatrixRow, ctx: RowContext) -> Any:
    if row.report.compiled_repeatable:
        return None
    changed = [c.name for c in row.report.rows if any("changed between two runs" in n for n in c.notes)]
    return BROKEN, ("two runs of one compiled build gave different bits"
                    + (f" ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''})" if changed else ""))


def _batch_invariant(row: MatrixRow, ctx: RowContext) -> Any:
    import torch

    from fusecheck.check import report_dtype
    from fusecheck.runs.cast import prepare_case
    from fusecheck.toggles import toggled

    from .batch import check_batch_invariance

    kw = ctx.kwargs
    prepared = prepare_case(ctx.case, report_dtype(kw.get("dtype")), kw.get("device", "cpu"))
    with toggled(list(row.toggles)):
        torch._dynamo.reset()
        try:
            status, why = check_batch_invariance(prepared.model, prepared.inputs, prepared.kwargs,
                                                 lambda: torch.compile(prepared.model))
        finally:
            torch._dynamo.reset()
    return None if status is None else (status, why)


CHECKS: dict[str, Callable[[MatrixRow, RowContext], Any]] = {
    NOT_WORSE: _not_worse,
    BITWISE_EAGER: _bitwise_eager,
    RUN_TO_RUN: _run_to_run,
    BATCH_INVARIANT: _batch_invariant,
}


def verify(row: MatrixRow, ctx: RowContext) -> None:
    """Check each promise of a row that ran; record broken and unverified ones on the row."""
    if row.report is None:
        return
    for name in row.promises:
        outcome = CHECKS[name](row, ctx)
        if outcome is None:
            continue
        status, why = outcome
        (row.broken if status == BROKEN else row.unverified)[name] = why
