"""The matrix's report: its rows, the interaction it found, its notes, the table within 120 columns, JSON."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .rows import BASELINE, MARK, NO_EFFECT, MatrixRow


@dataclass
class MatrixReport:
    case: str
    rows: list[MatrixRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    interaction: Any = None  # interactions.Interaction when the all row was worse than every single row

    @property
    def baseline(self) -> MatrixRow:
        return self.rows[0]

    @property
    def exit_code(self) -> int:
        return self.baseline.report.exit_code if self.baseline.report is not None else 2

    @property
    def most_moved(self) -> MatrixRow | None:
        return next((r for r in self.rows if r.most), None)

    def to_dict(self) -> dict[str, Any]:
        most = self.most_moved
        return {"case": self.case, "exit_code": self.exit_code, "moves_most": most.name if most else None,
                "notes": list(self.notes),
                "interaction": self.interaction.to_dict() if self.interaction is not None else None,
                "broken_promises": {r.name: dict(r.broken) for r in self.rows if r.broken},
                "rows": [r.to_dict() for r in self.rows]}

    def table(self) -> str:
        """The matrix within 120 columns: one row per toggle; a row that did not run says why under the table."""
        from fusecheck.report.table import WIDTH, _wrap, compact_number, count, render_table

        head = ["row", "kernels", "fused\nfx->k", "!=\neager", "rmse", "max\nrel", "ulp", "ratio", "vs\nref",
                "verdict", "note"]
        body, not_run = [], []
        for r in self.rows:
            n = r.numbers()
            if not n:
                why = r.skipped or "not run"
                body.append([r.name, "", "", "", "", "", "", "", "", "-", why.split(":")[0] + " (below)"])
                not_run.append(f"{r.name}: {why}")
                continue
            diff = "0" if n["bitwise_equal_to_eager"] else (f"{count(n['elements_differing_from_eager'])}/"
                                                            f"{count(n['numel'])}")
            fused = "" if n["kernels"] is None else f"{n['fx_nodes_fused']}->{n['fused_kernels']}"
            move = "" if r.reference is None else f"{r.movement:.2f}"
            note = MARK if r.most else ("no effect" if r.no_effect else "")
            if r.broken:
                note = ("broken: " + ", ".join(r.broken) + (f"; {note}" if note else "")).strip()
            body.append([r.name, n["kernels"], fused, diff, _g(n["rmse"]), _g(n["max_rel"]),
                         compact_number(n["ulp_max"]), compact_number(n["error_ratio"]), move, n["verdict"], note])
        refs = sorted({(r.reference, r.name) for r in self.rows if r.reference not in (None, BASELINE)})
        against = "the baseline row" + "".join(f"; {name}'s: the {ref} row" for ref, name in refs)
        legend = ("!= eager: elements not bitwise equal to eager; rmse/max rel/ulp: compiled vs golden (worst "
                  "output); ratio: compiled rmse / eager rmse; vs ref: max |log2| change of rmse against "
                  f"{against}")
        lines = [render_table(head, body, width=WIDTH, wrap={10: 9, 0: 16}), *_wrap(legend, "")]
        if any(r.no_effect for r in self.rows):
            lines.append(f"note 'no effect': {NO_EFFECT}")
        for r in self.rows:
            lines += [x for p, why in r.broken.items() for x in _wrap(f"{r.name}: broke its promise {p}: {why}", "")]
            lines += [x for p, why in r.unverified.items()
                      for x in _wrap(f"{r.name}: promise {p} not verified: {why}", "")]
        if self.interaction is not None:
            lines += _wrap("interaction: " + self.interaction.describe(), "")
        lines += [x for note in self.notes for x in _wrap(f"note: {note}", "")]
        if not_run:
            lines += ["not run:"] + [x for line in not_run for x in _wrap(line)]
        return "\n".join(lines)


def _g(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"
