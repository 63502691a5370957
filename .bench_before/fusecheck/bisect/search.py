"""The search: baseline, coarse (which decision family, switched off, fixes the verdict), fine (binary
search over "allow the first k" inside that family), then hold the culprit off and go again.

Every probe is one fresh compile judged by the core checker (`objective.run_trial`), so a decision that
only changes bits, or makes the result more accurate, never makes a probe fail and is never blamed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from fusecheck.bisect.gates import GATES, Decision, Plan
from fusecheck.bisect.objective import Trial, TrialOptions, run_trial

# Coarse stage order: the finest-grained families first, so the first family that fixes the verdict
# names individual decisions rather than a whole pass or setting.
FAMILY_ORDER = ["fusion", "inlining", "pattern", "decomposition", "lowering", "pass", "config"]


class BudgetSpent(Exception):
    """--max-compiles reached."""


@dataclass
class Culprit:
    decision: Decision
    partial: bool                  # holding it off improves the error but the verdict still fails
    with_it: dict[str, Any]        # trial summary with the decision allowed
    without_it: dict[str, Any]     # trial summary with it held off
    family_off_passed: bool
    kernels: list[str] = field(default_factory=list)
    alternatives: list[str] = field(default_factory=list)  # other families/decisions that also fixed it

    def to_dict(self) -> dict[str, Any]:
        return {**self.decision.to_dict(), "partial": self.partial, "kernels": self.kernels,
                "with": self.with_it, "without": self.without_it, "family_off_passed": self.family_off_passed,
                "alternatives": self.alternatives}


@dataclass
class BisectResult:
    status: str                     # pass | nondeterministic | culprits | no_culprit | error
    message: str
    baseline: dict[str, Any] | None
    culprits: list[Culprit]
    compiles: int
    max_compiles: int
    decisions: dict[str, int]       # decisions counted per family in the baseline compile
    final: dict[str, Any] | None = None
    unavailable: dict[str, str] = field(default_factory=dict)
    kernels: list[Any] = field(default_factory=list)   # per-kernel attribution rows
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {"pass": 0, "culprits": 1, "cannot_judge": 2}.get(self.status, 3)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "exit_code": self.exit_code,
                "compiles": self.compiles, "max_compiles": self.max_compiles, "decisions": self.decisions,
                "baseline": self.baseline, "final": self.final,
                "culprits": [c.to_dict() for c in self.culprits], "unavailable": self.unavailable,
                "kernels": [k.to_dict() if hasattr(k, "to_dict") else k for k in self.kernels],
                "seconds": self.seconds, "log": self.log}


class Search:
    """One bisection run: owns the compile budget, the held-off culprits and the progress output."""

    def __init__(self, case: Any, opts: TrialOptions, max_compiles: int,
                 progress: Callable[[str], None] | None = None):
        self.case, self.opts, self.max_compiles = case, opts, max_compiles
        self.progress = progress or (lambda line: None)
        self.compiles = 0
        self.blocked: dict[str, set[str]] = {k: set() for k in GATES}
        self.lines: list[str] = []
        self.unavailable: dict[str, str] = {}

    # -- probes ----------------------------------------------------------------------------------
    def say(self, stage: str, msg: str) -> None:
        line = f"[bisect] {stage:<9} compiles {self.compiles}/{self.max_compiles}  {msg}"
        self.lines.append(line)
        self.progress(line)

    def plans(self, off: str | None = None, limit: tuple[str, int] | None = None) -> dict[str, Plan]:
        plans = {k: Plan(None, frozenset(b)) for k, b in self.blocked.items()}
        if off is not None:
            plans[off] = Plan(0, plans[off].blocked)
        if limit is not None:
            plans[limit[0]] = Plan(limit[1], plans[limit[0]].blocked)
        return plans

    def probe(self, capture: bool = False, **plan_args: Any) -> Trial:
        if self.compiles >= self.max_compiles:
            raise BudgetSpent
        self.compiles += 1
        trial = run_trial(self.case, self.opts, self.plans(**plan_args), capture=capture)
        self.unavailable.update(trial.unavailable)
        return trial

    # -- stages ----------------------------------------------------------------------------------
    def fine_cost(self, fam: str, current: Trial) -> int:
        """Compiles the fine search and its confirmation need for `fam` (a lone decision needs none)."""
        n = len(current.decisions[fam])
        return 0 if n == 1 else math.ceil(math.log2(n)) + 1

    def coarse(self, current: Trial) -> list[tuple[str, Trial]]:
        """Every family switched off, one probe each. Not just the first that passes: refusing a decision
        of an early family can stop a pattern-conditional pass of a later one from firing, so all families
        are probed while the budget still leaves room to search the first passing one. Returns the passing
        families (FAMILY_ORDER), else the one that lowers the severity most, else nothing."""
        passing: list[tuple[str, Trial]] = []
        best: tuple[str, Trial] | None = None
        skipped: list[str] = []
        for fam in [f for f in FAMILY_ORDER if current.decisions.get(f)]:
            if passing and self.max_compiles - self.compiles - 1 < self.fine_cost(passing[0][0], current):
                skipped.append(fam)
                continue
            t = self.probe(off=fam)
            verdict = "PASS" if t.passed else (f"compile error: {t.error[:200]}" if t.error
                                               else f"FAIL severity {t.severity:.3g}")
            self.say("coarse", f"suspect={fam} ({len(current.decisions[fam])} decisions) off -> {verdict}")
            if t.passed:
                passing.append((fam, t))
            elif not t.error and t.severity < current.severity and (best is None or t.severity < best[1].severity):
                best = (fam, t)
        if skipped:
            self.say("coarse", f"not probed ({', '.join(skipped)}): budget kept for searching {passing[0][0]}")
        return passing or ([best] if best else [])

    def fine(self, fam: str, off: Trial, current: Trial) -> Decision:
        """Smallest k such that allowing the first k decisions of `fam` is bad; the culprit is #k-1.
        A probe that does not compile counts as bad (the refusal it needs is not the culprit's)."""
        decisions = current.decisions[fam]
        if off.passed:
            bad = lambda t: not t.passed  # noqa: E731
        else:  # partial: the decision that carries the error past the (geometric) midpoint
            hi_s = current.severity if math.isfinite(current.severity) else off.severity * 1e6
            threshold = math.sqrt(max(off.severity, 1e-30) * hi_s)
            bad = lambda t: t.severity > threshold  # noqa: E731
        lo, hi = 0, len(decisions)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            t = self.probe(limit=(fam, mid))
            is_bad = bad(t)
            what = f"compile error: {t.error[:200]}" if t.error else f"severity {t.severity:.3g}"
            self.say("fine", f"suspect={fam} allow first {mid}/{len(decisions)} -> {'bad' if is_bad else 'good'}"
                     f" ({what})")
            if is_bad:
                hi = mid
            else:
                lo = mid
        return decisions[hi - 1]

    def confirm(self, fam: str, decision: Decision, off: Trial, current: Trial) -> Trial:
        """One probe with the suspect held off; a family of one decision reuses its switch-off probe."""
        self.blocked[fam].add(decision.key)
        if len(current.decisions[fam]) == 1:
            return off
        try:
            return self.probe()
        except BudgetSpent:
            self.blocked[fam].discard(decision.key)
            raise

    def choose(self, current: Trial, candidates: list[tuple[str, Trial]]) -> tuple[Culprit | None, Trial | None]:
        """Fine-search the candidate families in order; the first whose culprit alone passes wins, else the
        one that improves most. Families whose switch-off also passed are reported as alternatives."""
        found: list[tuple[Culprit, Trial]] = []
        try:
            for fam, off in candidates:
                decision = self.fine(fam, off, current)
                after = self.confirm(fam, decision, off, current)
                self.say("confirm", f"{decision.kind} #{decision.index}: {decision.name} -> held off: "
                         f"{'PASS' if after.passed else 'FAIL'} severity {current.severity:.3g} -> {after.severity:.3g}")
                self.blocked[fam].discard(decision.key)
                if after.passed or after.severity < current.severity:
                    found.append((Culprit(decision, not after.passed, current.summary(), after.summary(),
                                          off.passed), after))
                if after.passed:
                    break
        except BudgetSpent:
            if not found:
                raise
        if not found:
            return None, None
        culprit, after = min(found, key=lambda f: (not f[1].passed, f[1].severity))
        self.blocked[culprit.decision.kind].add(culprit.decision.key)
        searched = {c.decision.kind for c, _ in found}
        others = [f for f, t in candidates if t.passed and f not in searched]
        culprit.alternatives = [f"{f} (switched off, also passes)" for f in others] + \
            [f"{c.decision.kind}: {c.decision.name} (held off alone: {'PASS' if t.passed else 'partial'})"
             for c, t in found if c is not culprit]
        if culprit.alternatives:
            self.say("culprit", "alternatives: " + "; ".join(culprit.alternatives))
        return culprit, after


def kernels_of(census: Any, decision: Decision) -> list[str]:
    """Kernels that the decision's FX nodes ended up in, from the kernel census of the compile."""
    if census is None or not decision.fx_nodes:
        return []
    out: list[str] = []
    wanted = set(decision.fx_nodes)
    for fid, data in census.graph.nodes(data=True):
        if data.get("kind") != "fx" or data.get("graph") != decision.graph:
            continue
        # post-grad names (fusion, inlining, pattern) or pre-grad origins (decompositions)
        if data["name"] in wanted or wanted & set(data.get("pre_grad") or ()):
            label = lambda k: census.graph.nodes[k]["name"] + (f" (graph {decision.graph})" if decision.graph else "")  # noqa: E731
            out += [label(k) for k in census.graph.successors(fid) if label(k) not in out]
    return out


def bisect(case: Any, opts: TrialOptions | None = None, *, max_compiles: int = 40, attribution: bool = True,
           progress: Callable[[str], None] | None = None) -> BisectResult:
    """Find the compiler decisions that make `case` compiled worse than eager against the golden."""
    import time

    t0 = time.perf_counter()
    s = Search(case, opts or TrialOptions(), max_compiles, progress)
    culprits: list[Culprit] = []
    kernel_rows: list[Any] = []

    def attribute_kernels(base: Trial) -> None:
        """Per-kernel attribution after the search, in the compiles the search left (each kernel is one)."""
        from fusecheck.bisect.attribution import attribute
        budget = min(16, max_compiles - s.compiles)
        if budget <= 0:
            s.say("kernels", "per-kernel attribution skipped: --max-compiles spent")
            return
        rows, notes, used = attribute(base.captured, base.report.census, base.report.policy, max_kernels=budget)
        s.compiles += used
        kernel_rows.extend(rows)
        worse = [r for r in rows if r.worse]
        s.say("kernels", f"{len(rows)} kernel outputs judged alone ({used} compiles); worse than eager: "
              + (", ".join(f"{r.kernel} ({r.output})" for r in worse) or "none")
              + "".join(f"; {n}" for n in notes))

    def done(status: str, message: str, base: Trial | None, final: Trial | None) -> BisectResult:
        if attribution and base is not None and base.report is not None and not base.passed \
                and base.report.compiled_repeatable:
            attribute_kernels(base)
        s.say("done", message)
        census = getattr(base.report, "census", None) if base and base.report else None
        for c in culprits:
            c.kernels = kernels_of(census, c.decision)
        return BisectResult(status, message, base.summary() if base else None, culprits, s.compiles, max_compiles,
                            {k: len(v) for k, v in (base.decisions if base else {}).items()},
                            final.summary() if final else None, s.unavailable, kernel_rows,
                            time.perf_counter() - t0, s.lines)

    try:
        base = s.probe(capture=attribution)
    except BudgetSpent:
        return done("no_culprit", "--max-compiles allows no compile", None, None)
    if base.error:
        return done("error", f"the target does not compile: {base.error}", base, None)
    s.say("baseline", f"{'PASS' if base.passed else 'FAIL'} severity {base.severity:.3g}; decisions: "
          + ", ".join(f"{k} {len(v)}" for k, v in base.decisions.items()))
    if base.report.exit_code == 2:
        bad = [r.name for r in base.report.rows if r.verdict.status.value == "ERROR"]
        return done("cannot_judge", f"{', '.join(bad)} cannot be judged (ERROR rows: see `fusecheck check`): "
                    "nothing to bisect", base, None)
    if not base.report.compiled_repeatable:
        return done("nondeterministic", "compiled output differs between two runs with the same inputs: "
                    "not bisecting a nondeterministic target", base, None)
    if base.passed:
        return done("pass", "the target already passes: compiled is not worse than eager", base, base)

    current = base
    try:
        while not current.passed:
            candidates = s.coarse(current)
            if not candidates:
                return done("culprits" if culprits else "no_culprit",
                            "no decision family improves the verdict when switched off"
                            + (f" after {len(culprits)} culprit(s)" if culprits else ""), base, current)
            culprit, after = s.choose(current, candidates)
            if culprit is None:
                return done("culprits" if culprits else "no_culprit",
                            "no suspect helps on its own (decisions interact): "
                            + ", ".join(f for f, _ in candidates), base, current)
            culprits.append(culprit)
            current = after
    except BudgetSpent:
        return done("culprits" if culprits else "no_culprit",
                    f"--max-compiles {max_compiles} spent before the verdict passed", base, current)
    return done("culprits", f"{len(culprits)} culprit(s) found; with them held off the target passes", base, current)
