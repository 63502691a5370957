"""One matrix row: the toggles it ran with, its check report, what it promised and whether it kept it, and
how far its numbers moved from its reference row. Torch-free at import (`fusecheck matrix -h`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

BASELINE = "baseline"
ALL = "all"
MARK = "<< moves most"
NO_EFFECT = "no effect on this target (same kernels, same numbers)"

# what a row is: one toggle, all together, or a row the interaction search added
SINGLE, TOGETHER, LEAVE_ONE_OUT, SUBSET = "single", "all", "leave-one-out", "subset"


@dataclass
class MatrixRow:
    name: str
    toggles: tuple[str, ...]
    reference: str | None = None  # row this one is compared with
    skipped: str | None = None  # "not applicable: ..." / "unsupported: ..." / "error: ..."
    report: Any = None  # CheckReport
    movement: float = 0.0  # max over outputs of |log2(rmse_row / rmse_reference)|
    most: bool = False
    no_effect: bool = False  # same kernels and the very same numbers as its reference row
    kind: str = SINGLE
    promises: tuple[str, ...] = ()  # what its toggles promise (passes/promises.py), not_worse first
    broken: dict[str, str] = field(default_factory=dict)  # promise -> how it was broken
    unverified: dict[str, str] = field(default_factory=dict)  # promise -> why it could not be checked

    @property
    def verdict(self) -> str | None:
        """The check's verdict, FAIL when a promise beyond "not worse" was broken; None when it did not run."""
        if self.report is None:
            return None
        return "FAIL" if self.broken and self.report.status == "PASS" else self.report.status

    # -- numbers from the report ----------------------------------------------------------------------
    def _comparisons(self) -> list[Any]:
        return list(getattr(self.report, "rows", []))

    def golden_rmse(self) -> dict[str, float]:
        return {c.name: c.vs_golden.rmse for c in self._comparisons() if c.vs_golden is not None}

    def error_ratio(self) -> float | None:
        ratios = [c.error_ratio for c in self._comparisons() if c.error_ratio is not None]
        return max(ratios, default=None)

    def numbers(self) -> dict[str, Any]:
        if self.report is None:
            return {}
        rows = self._comparisons()
        ref = [c.vs_reference for c in rows if c.vs_reference is not None]
        gold = [c.vs_golden for c in rows if c.vs_golden is not None]
        census = self.report.census
        if census is not None and getattr(census, "unavailable", None):
            census = None
        numel = sum(int(m.numel) for m in ref)
        equal = sum(int(m.bitwise_equal) for m in ref if m.bitwise_equal >= 0)
        return {
            "kernels": census.n_kernels if census is not None else None,
            "fx_nodes_fused": census.n_fx_nodes_fused if census is not None else None,
            "fused_kernels": census.n_fused_kernels if census is not None else None,
            "bitwise_equal_to_eager": numel > 0 and equal == numel,
            "elements_differing_from_eager": numel - equal,
            "numel": numel,
            "rmse": max((m.rmse for m in gold), default=None),
            "max_rel": max((m.max_rel for m in gold), default=None),
            "ulp_max": max((m.ulp_max for m in gold), default=None),
            "error_ratio": self.error_ratio(),
            "check_verdict": self.report.status,
            "verdict": self.verdict,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "toggles": list(self.toggles), "kind": self.kind, "reference": self.reference,
            "skipped": self.skipped, "movement": self.movement, "moves_most": self.most, "no_effect": self.no_effect,
            "promises": list(self.promises), "broken_promises": dict(self.broken),
            "unverified_promises": dict(self.unverified),
            **self.numbers(),
            "census": self.report.census.to_dict() if self.report is not None and self.report.census else None,
            "report": self.report.to_dict() if self.report is not None else None,
        }


def _movement(row: MatrixRow, ref: MatrixRow) -> float:
    a, b = row.golden_rmse(), ref.golden_rmse()
    tiny = 1e-30
    moves = [abs(math.log2((a[k] + tiny) / (b[k] + tiny))) for k in a.keys() & b.keys()
             if math.isfinite(a[k]) and math.isfinite(b[k])]
    return max(moves, default=0.0)


def _fingerprint(row: MatrixRow) -> tuple[Any, ...]:
    """What a toggle could change: the kernels (census signature) and every output's numbers."""
    census = getattr(row.report, "census", None)
    kernels = census.signature() if census is not None and hasattr(census, "signature") else None
    numbers = tuple((c.name, tuple(sorted(c.vs_golden.values.items())) if c.vs_golden else None,
                     c.vs_reference.bitwise_equal if c.vs_reference else None) for c in row._comparisons())
    return kernels, numbers


def mark_most_moved(rows: list[MatrixRow]) -> None:
    """Set each row's movement against its reference row; mark the largest (none if nothing moved) and
    mark rows identical to their reference as having no effect, so a silent no-op is visible."""
    by_name = {r.name: r for r in rows if r.report is not None}
    for row in rows:
        ref = by_name.get(row.reference) if row.reference else None
        if row.report is not None and ref is not None:
            row.movement = _movement(row, ref)
            row.no_effect = _fingerprint(row) == _fingerprint(ref)
    movers = [r for r in rows if r.report is not None and r.reference and r.movement > 0]
    if movers:
        max(movers, key=lambda r: r.movement).most = True
