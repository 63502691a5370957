"""`run_matrix`: the baseline check, one check per toggle, optionally all together; each row's promises
verified; when the all row is worse than every single row, the interaction search's rows.

Each row is a full ``run_check`` under ``fusecheck.toggles.toggled(row.toggles)``; its numbers are compared
with its reference row (the baseline, or ``max_autotune`` for ``fusion.template`` so that the difference
is the template fusion alone). Toggles that cannot change the captured graphs are listed as "not
applicable" instead of producing a row of identical numbers, and said in a note.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .report import MatrixReport
from .rows import ALL, BASELINE, SINGLE, TOGETHER, MatrixRow, mark_most_moved

if TYPE_CHECKING:  # torch is imported when a matrix runs, not for `fusecheck matrix -h`
    from fusecheck.case import Case

# Not offered by default: reference rows that the matrix adds itself when a toggle needs them.
REFERENCE_ONLY = frozenset({"max_autotune"})


def plan(toggles: Sequence[str] | None) -> list[str]:
    """Toggle names for the matrix: the requested ones (validated), or every toggle but reference-only ones."""
    from fusecheck.toggles import TOGGLES, resolve

    if toggles is None:
        return [n for n in TOGGLES if n not in REFERENCE_ONLY]
    names = [t.name for t in resolve(toggles) if t.name in toggles]
    return names


def _unsupported(names: list[str], explicit: bool) -> dict[str, str]:
    from fusecheck.toggles import ToggleUnsupported, resolve

    out: dict[str, str] = {}
    for name in names:
        try:
            for t in resolve([name]):
                t.check()
        except ToggleUnsupported as exc:
            if explicit:
                raise
            out[name] = f"unsupported: {exc}"
    return out


class RowRunner:
    """Runs one row: the check under its toggles, then its promises. Used for every row, search rows too."""

    def __init__(self, case: Case, kwargs: dict[str, Any]) -> None:
        from .promises import RowContext

        self.case, self.kwargs = case, kwargs
        self.context = RowContext(case, kwargs)

    def __call__(self, row: MatrixRow) -> MatrixRow:
        from fusecheck.check import CompileError, run_check
        from fusecheck.toggles import TOGGLES, ToggleError
        from fusecheck.toggles.promises import promised

        from .promises import verify

        row.promises = promised(row.toggles, {n: t.promises for n, t in TOGGLES.items()})
        try:
            row.report = run_check(self.case, toggles=row.toggles, **self.kwargs)
        except (CompileError, ToggleError) as exc:
            row.skipped = f"error: {exc}"
            return row
        verify(row, self.context)
        return row


def run_matrix(case: Case, toggles: Sequence[str] | None = None, all_together: bool = False,
               **run_check_kwargs: Any) -> MatrixReport:
    """Baseline, then one row per toggle (None = all applicable), optionally one with all of them and, when
    that one is worse than every single row, the rows that name the interacting toggles."""
    from fusecheck.backends import resolve_backend
    from fusecheck.case import TargetError
    from fusecheck.toggles import TOGGLES, applicability
    from fusecheck.cli.progress import step

    from .interactions import search

    explicit = toggles is not None
    names = plan(toggles)
    backend = resolve_backend(run_check_kwargs.get("backend", "inductor"))
    if not backend.is_inductor:
        raise TargetError(f"the toggle matrix acts on Inductor; backend {backend.name!r} is not Inductor")
    unsupported = _unsupported(names, explicit)
    runner = RowRunner(case, run_check_kwargs)
    train = bool(run_check_kwargs.get("train", False))

    report = MatrixReport(case.name)
    step(1, 1 + len(names), BASELINE)  # the total is known once applicability is (after the baseline)
    from fusecheck.check import run_check
    from fusecheck.toggles.promises import NOT_WORSE

    base = MatrixRow(BASELINE, (), promises=(NOT_WORSE,))
    base.report = run_check(case, toggles=(), **run_check_kwargs)  # a baseline that cannot compile: exit 3
    report.rows.append(base)
    graphs = [g.gm for g in base.report.graphs]
    reasons = applicability([n for n in names if n not in unsupported], graphs, train=train)
    if not train:
        report.notes += [f"forward-only run: {n} does not apply ({why.removeprefix('not applicable: ')})"
                         for n, why in reasons.items() if why and TOGGLES[n].training_only]
    reasons.update(unsupported)

    wanted = [n for n in names if reasons.get(n) is None]
    for ref in sorted({r for n in wanted for r in TOGGLES[n].reference}):
        if ref not in wanted:
            wanted.insert(0, ref)
    rows = [MatrixRow(n, (n,), reference=(TOGGLES[n].reference[0] if TOGGLES[n].reference else BASELINE))
            for n in wanted]
    together = tuple(n for n in wanted if n not in REFERENCE_ONLY)
    if all_together and len(together) > 1:
        rows.append(MatrixRow(ALL, together, reference=BASELINE, kind=TOGETHER))
    for i, row in enumerate(rows):
        step(i + 2, len(rows) + 1, row.name)
        report.rows.append(runner(row))

    all_row = next((r for r in rows if r.kind == TOGETHER), None)
    if all_row is not None:
        singles = [r for r in rows if r.kind == SINGLE and r.name in together]

        def more(ts: tuple[str, ...], name: str, kind: str) -> MatrixRow:
            step(len(report.rows) + 1, len(report.rows) + 1, name)
            row = runner(MatrixRow(name, ts, reference=BASELINE, kind=kind))
            report.rows.append(row)
            return row

        report.interaction = search(all_row, singles, more)
    for name in names:
        if reasons.get(name) is not None:
            report.rows.append(MatrixRow(name, (name,), skipped=reasons[name]))

    mark_most_moved(report.rows)
    return report
