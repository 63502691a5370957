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

    def to_dict(self) -> dict[str, Any]:
        return {**self.decision.to_dict(), "partial": self.partial, "kernels": self.kernels,
                "with": self.with_it, "without": self.without_it, "family_off_passed": self.family_off_passed}


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
        return {"pass": 0, "culprits": 1}.get(self.status, 3)

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
        self.last_off: dict[str, float] = {}   # severity with each family off, from the last coarse round

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
    def coarse(self, current: Trial) -> tuple[str, Trial] | None:
        """The family whose switch-off passes (first in FAMILY_ORDER), else the one that helps most."""
        best: tuple[str, Trial] | None = None
        families = [f for f in FAMILY_ORDER if current.decisions.get(f)]
        # after a culprit is held off, try first the families that helped most last round
        families.sort(key=lambda f: self.last_off.get(f, math.inf))
        for fam in families:
            t = self.probe(off=fam)
            self.last_off[fam] = t.severity
            verdict = "PASS" if t.passed else ("compile error" if t.error else f"FAIL severity {t.severity:.3g}")
            self.say("coarse", f"suspect={fam} ({len(current.decisions[fam])} decisions) off -> {verdict}")
            if t.passed:
                return fam, t
            if not t.error and t.severity < current.severity and (best is None or t.severity < best[1].severity):
                best = (fam, t)
        return best

    def fine(self, fam: str, off: Trial, current: Trial) -> Decision:
        """Smallest k such that allowing the first k decisions of `fam` is bad; the culprit is #k-1."""
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
            self.say("fine", f"suspect={fam} allow first {mid}/{len(decisions)} -> {'bad' if is_bad else 'good'}"
                     f" (severity {t.severity:.3g})")
            if is_bad:
                hi = mid
            else:
                lo = mid
        return decisions[hi - 1]


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

    def done(status: str, message: str, base: Trial | None, final: Trial | None) -> BisectResult:
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
    if not base.report.compiled_repeatable:
        return done("nondeterministic", "compiled output differs between two runs with the same inputs: "
                    "not bisecting a nondeterministic target", base, None)
    if base.passed:
        return done("pass", "the target already passes: compiled is not worse than eager", base, base)

    if attribution:
        from fusecheck.bisect.attribution import attribute
        rows, notes = attribute(base.captured, base.report.census, base.report.policy)
        kernel_rows.extend(rows)
        worse = [r for r in rows if r.worse]
        s.say("kernels", f"{len(rows)} kernel outputs judged alone; worse than eager: "
              + (", ".join(f"{r.kernel} ({r.output})" for r in worse) or "none")
              + "".join(f"; {n}" for n in notes))

    current = base
    try:
        while not current.passed:
            found = s.coarse(current)
            if found is None:
                return done("culprits" if culprits else "no_culprit",
                            "no decision family improves the verdict when switched off"
                            + (f" after {len(culprits)} culprit(s)" if culprits else ""), base, current)
            fam, off = found
            decision = s.fine(fam, off, current)
            s.blocked[fam].add(decision.key)
            s.last_off.pop(fam, None)  # what switching it off gained is now explained by the culprit
            after = s.probe()
            improved = after.passed or after.severity < current.severity
            s.say("culprit", f"{decision.kind} #{decision.index}: {decision.name} -> held off: "
                  f"{'PASS' if after.passed else 'FAIL'} severity {current.severity:.3g} -> {after.severity:.3g}")
            if not improved:
                s.blocked[fam].discard(decision.key)
                return done("culprits" if culprits else "no_culprit",
                            f"suspect {decision.name} does not help on its own (decisions interact)", base, current)
            culprits.append(Culprit(decision, not after.passed, current.summary(), after.summary(), off.passed))
            current = after
    except BudgetSpent:
        return done("culprits" if culprits else "no_culprit",
                    f"--max-compiles {max_compiles} spent before the verdict passed", base, current)
    return done("culprits", f"{len(culprits)} culprit(s) found; with them held off the target passes", base, current)
