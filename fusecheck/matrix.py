"""The toggle matrix: the core check once for the baseline and once per fusion toggle, side by side.

Each row is a full ``run_check`` under ``fusecheck.passes.toggled(row.toggles)``; its numbers are
compared with its reference row (the baseline, or ``max_autotune`` for ``fusion.template`` so that the
difference is the template fusion alone). The row whose error against the golden moves most relative
to its reference is marked. Toggles that cannot change the captured graphs are listed as "not
applicable" instead of producing a row of identical numbers.

Exit code of ``fusecheck matrix``: the baseline's (0 pass, 1 fail); toggle rows are diagnostic.
Unknown or unsupported toggles asked for by name, and non-Inductor backends, exit 2.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # torch is imported when a matrix runs, not for `fusecheck matrix -h`
    from fusecheck.case import Case

BASELINE = "baseline"
ALL = "all"
MARK = "<< moves most"
# Not offered by default: reference rows that the matrix adds itself when a toggle needs them.
REFERENCE_ONLY = frozenset({"max_autotune"})


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

    # -- numbers from the report ----------------------------------------------------------------------
    def _comparisons(self) -> list[Any]:
        return list(getattr(self.report, "rows", []))

    def golden_rmse(self) -> dict[str, float]:
        return {c.name: c.vs_golden.rmse for c in self._comparisons() if c.vs_golden is not None}

    def numbers(self) -> dict[str, Any]:
        if self.report is None:
            return {}
        rows = self._comparisons()
        ref = [c.vs_reference for c in rows if c.vs_reference is not None]
        gold = [c.vs_golden for c in rows if c.vs_golden is not None]
        ratios = [c.error_ratio for c in rows if c.error_ratio is not None]
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
            "error_ratio": max(ratios, default=None),
            "verdict": self.report.status,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "toggles": list(self.toggles), "reference": self.reference,
            "skipped": self.skipped, "movement": self.movement, "moves_most": self.most, "no_effect": self.no_effect,
            **self.numbers(),
            "census": self.report.census.to_dict() if self.report is not None and self.report.census else None,
            "report": self.report.to_dict() if self.report is not None else None,
        }


@dataclass
class MatrixReport:
    case: str
    rows: list[MatrixRow] = field(default_factory=list)

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
            body.append([r.name, n["kernels"], fused, diff, _g(n["rmse"]), _g(n["max_rel"]),
                         compact_number(n["ulp_max"]), compact_number(n["error_ratio"]), move, n["verdict"],
                         MARK if r.most else ("no effect" if r.no_effect else "")])
        refs = sorted({(r.reference, r.name) for r in self.rows if r.reference not in (None, BASELINE)})
        against = "the baseline row" + "".join(f"; {name}'s: the {ref} row" for ref, name in refs)
        legend = ("!= eager: elements not bitwise equal to eager; rmse/max rel/ulp: compiled vs golden (worst "
                  "output); ratio: compiled rmse / eager rmse; vs ref: max |log2| change of rmse against "
                  f"{against}")
        lines = [render_table(head, body, width=WIDTH, wrap={10: 9, 0: 16}), *_wrap(legend, "")]
        if any(r.no_effect for r in self.rows):
            lines.append(f"note 'no effect': {NO_EFFECT}")
        if not_run:
            lines += ["not run:"] + [x for line in not_run for x in _wrap(line)]
        return "\n".join(lines)


NO_EFFECT = "no effect on this target (same kernels, same numbers)"


def _g(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


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


def plan(toggles: Sequence[str] | None) -> list[str]:
    """Toggle names for the matrix: the requested ones (validated), or every toggle but reference-only ones."""
    from fusecheck.passes import TOGGLES, resolve

    if toggles is None:
        return [n for n in TOGGLES if n not in REFERENCE_ONLY]
    names = [t.name for t in resolve(toggles) if t.name in toggles]
    return names


def run_matrix(case: Case, toggles: Sequence[str] | None = None, all_together: bool = False,
               **run_check_kwargs: Any) -> MatrixReport:
    """Baseline, then one row per toggle (None = all applicable), optionally one with all of them."""
    from fusecheck.backends import resolve_backend
    from fusecheck.case import TargetError
    from fusecheck.passes import TOGGLES, ToggleError, ToggleUnsupported, applicability, resolve
    from fusecheck.check import CompileError, run_check

    explicit = toggles is not None
    names = plan(toggles)
    backend = resolve_backend(run_check_kwargs.get("backend", "inductor"))
    if not backend.is_inductor:
        raise TargetError(f"the toggle matrix acts on Inductor; backend {backend.name!r} is not Inductor")
    unsupported: dict[str, str] = {}
    for name in names:
        try:
            for t in resolve([name]):
                t.check()
        except ToggleUnsupported as exc:
            if explicit:
                raise
            unsupported[name] = f"unsupported: {exc}"

    from fusecheck.progress import step

    report = MatrixReport(case.name)
    base = MatrixRow(BASELINE, ())
    step(1, 1 + len(names), BASELINE)  # the total is known once applicability is (after the baseline)
    base.report = run_check(case, toggles=(), **run_check_kwargs)
    report.rows.append(base)
    graphs = [g.gm for g in base.report.graphs]
    reasons = applicability([n for n in names if n not in unsupported], graphs,
                            train=bool(run_check_kwargs.get("train", False)))
    reasons.update(unsupported)

    wanted = [n for n in names if reasons.get(n) is None]
    if any(TOGGLES[n].reference for n in wanted):
        for ref in sorted({r for n in wanted for r in TOGGLES[n].reference}):
            if ref not in wanted:
                wanted.insert(0, ref)
    rows = [MatrixRow(n, (n,), reference=(TOGGLES[n].reference[0] if TOGGLES[n].reference else BASELINE))
            for n in wanted]
    if all_together and len([n for n in wanted if n not in REFERENCE_ONLY]) > 1:
        together = tuple(n for n in wanted if n not in REFERENCE_ONLY)
        rows.append(MatrixRow(ALL, together, reference=BASELINE))
    for i, row in enumerate(rows):
        step(i + 2, len(rows) + 1, row.name)
        try:
            row.report = run_check(case, toggles=row.toggles, **run_check_kwargs)
        except (CompileError, ToggleError) as exc:
            row.skipped = f"error: {exc}"
        report.rows.append(row)
    for name in names:
        if reasons.get(name) is not None:
            report.rows.append(MatrixRow(name, (name,), skipped=reasons[name]))

    mark_most_moved(report.rows)
    return report


# -- CLI ---------------------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    from fusecheck.check_cli import add_common_arguments, add_html_argument

    add_common_arguments(p)
    p.add_argument("--toggles", "--toggle", dest="toggles", default=None, metavar="NAME[,NAME]",
                   help="comma-separated toggles, one row each (default: every toggle that applies to the "
                        "target; see `fusecheck toggles`)")
    p.add_argument("--all-together", action="store_true", help="add a row with all the toggles at once")
    add_html_argument(p)


def run(args: argparse.Namespace) -> int:
    from fusecheck.case import load_target, refuse_meta
    from fusecheck.outputs import write_reports
    from fusecheck.passes import ToggleError
    from fusecheck.policy import Policy
    from fusecheck.report.json_report import write_json

    toggles = None if args.toggles is None else [t.strip() for t in args.toggles.split(",") if t.strip()]
    if toggles is not None and not toggles:
        raise ToggleError("--toggles is empty; leave it out for every applicable toggle")
    from fusecheck.progress import quiet_compiler_logs
    from fusecheck.watchdog import phase

    phase(f"loading the target {args.target or '(built-in transformer block)'}")
    case = load_target(args.target, seed=args.seed)
    refuse_meta(case)
    with quiet_compiler_logs(not args.verbose):
        report = run_matrix(case, toggles, all_together=args.all_together, backend=args.backend, dtype=args.dtype,
                            device=args.device, train=args.train, policy=Policy.load(args.policy), seed=args.seed)
    data = report.to_dict()
    from fusecheck.report.html import write_html
    write_reports([("--json", args.json_path, lambda: write_json(data, args.json_path)),  # before the verdict
                   ("--html", args.html, lambda: write_html("matrix", data, args.html))],
                  verdict=f"{report.baseline.report.status if report.baseline.report else 'ERROR'} "
                          f"(exit {report.exit_code})")
    from fusecheck.report.table import _wrap
    dtype = args.dtype or "the model’s own"
    print("\n".join(_wrap(f"fusecheck matrix: {case.name}  backend={args.backend}  dtype={dtype}  "
                          f"device={args.device}  train={args.train}", "")))
    print(report.table())
    return report.exit_code
