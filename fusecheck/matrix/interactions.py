"""Why toggles together do what none does alone. When the all-together row is worse than every single row,
the search runs the leave-one-out rows (all toggles but one), then the pairs those rows point to, and names
the smallest set of toggles whose combination is worse than each toggle alone.

"Worse" reads the reports' own numbers: a worse verdict (FAIL against PASS, a broken promise included), or
the same verdict with an error ratio (compiled rmse / eager rmse, worst output) more than WORSE_FACTOR times
larger. Nothing runs unless the all row is worse than every single row, so a matrix without an interaction
costs nothing more. The combination need not be monotone (a third toggle may undo a pair's effect): each
candidate set is run, never inferred.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .rows import LEAVE_ONE_OUT, SUBSET, MatrixRow

WORSE_FACTOR = 2.0  # the verdict's own RMSE ratio limit: a smaller change is within what "not worse" allows
MAX_ROWS = 40       # rows the search may add (leave-one-out rows, pairs, the set the leave-one-out rows name)
_RANK = {"PASS": 0, "FAIL": 1}


def worse(a: MatrixRow, b: MatrixRow) -> bool:
    """Is row a worse than row b? Rows that did not run (or ERROR) are never compared."""
    va, vb = a.verdict, b.verdict
    if va not in _RANK or vb not in _RANK:
        return False
    if va != vb:
        return _RANK[va] > _RANK[vb]
    ra, rb = a.error_ratio(), b.error_ratio()
    return ra is not None and rb is not None and ra > WORSE_FACTOR * rb


def worse_than_each(row: MatrixRow, singles: Sequence[MatrixRow]) -> bool:
    return bool(singles) and all(worse(row, s) for s in singles)


@dataclass
class Interaction:
    together: MatrixRow                     # the all row that started the search
    singles: list[MatrixRow]
    found: tuple[str, ...] | None = None    # the smallest set that is worse than each toggle alone
    shown_by: MatrixRow | None = None       # the row that shows it
    tried: list[MatrixRow] = field(default_factory=list)  # rows the search added, in order
    budget_spent: bool = False

    def describe(self) -> str:
        worst = max(self.singles, key=lambda r: (_RANK.get(r.verdict or "", 2), r.error_ratio() or 0.0))
        n = len(self.together.toggles)
        head = (f"{'both' if n == 2 else f'all {n}'} toggles together ({_state(self.together)}) are worse than "
                f"each toggle alone (the worst alone: {worst.name}, {_state(worst)})")
        if self.found is None:
            why = "the search's budget ran out" if self.budget_spent else "no smaller set shows it"
            return f"{head}; {why} after {len(self.tried)} more rows: the whole set is the interaction"
        what = ("the smallest set that makes it worse" if len(self.found) <= 2 else
                "the set that makes it worse (no pair of it does; a toggle the all row did not need is not searched)")
        return (f"{head}; {what}: {' + '.join(self.found)} ({_state(self.shown_by)}), found with "
                f"{len(self.tried)} more rows")

    def to_dict(self) -> dict[str, Any]:
        return {"toggles": list(self.found) if self.found else None,
                "shown_by": self.shown_by.name if self.shown_by else None,
                "ratio": self.shown_by.error_ratio() if self.shown_by else None,
                "verdict": self.shown_by.verdict if self.shown_by else None,
                "all_ratio": self.together.error_ratio(), "all_verdict": self.together.verdict,
                "single_ratios": {r.name: r.error_ratio() for r in self.singles},
                "rows_added": [r.name for r in self.tried], "budget_spent": self.budget_spent,
                "worse_factor": WORSE_FACTOR, "text": self.describe()}


def _state(row: MatrixRow | None) -> str:
    if row is None:
        return "-"
    ratio = row.error_ratio()
    return f"{row.verdict}, ratio {ratio:.3g}" if ratio is not None else f"{row.verdict}"


def _candidates(toggles: tuple[str, ...], needed: list[str]) -> list[tuple[str, ...]]:
    """The pairs the leave-one-out rows point to: among the needed toggles, else each needed one with every
    other, else every pair; then the needed set itself when it is larger than a pair."""
    if len(needed) >= 2:
        pairs = list(itertools.combinations(needed, 2))
    elif len(needed) == 1:
        pairs = [tuple(t for t in toggles if t in (needed[0], o)) for o in toggles if o != needed[0]]
    else:
        pairs = list(itertools.combinations(toggles, 2))
    return pairs + ([tuple(needed)] if len(needed) > 2 else [])


def search(together: MatrixRow, singles: list[MatrixRow],
           run: Callable[[tuple[str, ...], str, str], MatrixRow], max_rows: int = MAX_ROWS) -> Interaction | None:
    """None when the all row is not worse than every single row. `run(toggles, name, kind)` checks one more
    row (the matrix's own row runner: promises verified, notes kept)."""
    singles = [s for s in singles if s.verdict in _RANK]
    if not worse_than_each(together, singles):
        return None
    result = Interaction(together, singles)
    toggles = together.toggles
    known = {frozenset(s.toggles): s for s in singles} | {frozenset(toggles): together}

    def row_for(ts: tuple[str, ...], name: str, kind: str) -> MatrixRow | None:
        key = frozenset(ts)
        if key not in known:
            if len(result.tried) >= max_rows:
                result.budget_spent = True
                return None
            known[key] = run(ts, name, kind)
            result.tried.append(known[key])
        return known[key]

    needed = []
    for t in toggles:
        rest = tuple(x for x in toggles if x != t)
        row = row_for(rest, f"all - {t}", LEAVE_ONE_OUT)
        if row is None:
            return result
        if not worse_than_each(row, singles):
            needed.append(t)  # without it the combination is no longer worse
    for ts in _candidates(toggles, needed):
        row = row_for(ts, " + ".join(ts), SUBSET)
        if row is None:
            return result
        if worse_than_each(row, singles):
            result.found, result.shown_by = ts, row
            return result
    return result
