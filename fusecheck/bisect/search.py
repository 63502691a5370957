"""The search: baseline, coarse (which decision family, switched off, fixes the verdict), fine (binary
search over "allow the first k" inside that family), then hold the culprit off and go again.

Every probe is one fresh compile judged by the core checker (`objective.run_trial`), so a decision that
only changes bits, or makes the result more accurate, never makes a probe fail and is never blamed.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from fusecheck.bisect import evidence
from fusecheck.bisect.gates import GATES, Decision, Plan
from fusecheck.bisect.objective import Trial, run_trial
from fusecheck.bisect.result import BisectResult, Culprit
from fusecheck.check.options import CheckOptions

# Coarse stage order where the split (lowering off) cannot be made: the finest-grained families first, so
# the first family that fixes the verdict names individual decisions rather than a whole pass or setting.
FAMILY_ORDER = ["fusion", "inlining", "pattern", "decomposition", "lowering", "pass", "config"]
# The split (Search.split): families that rewrite the FX graph, whose error shows when the graph runs op by
# op, and families that decide how Inductor generates code for it (lowering itself is the split probe).
GRAPH_LEVEL = ["pattern", "pass", "decomposition"]
CODEGEN = ["inlining", "fusion", "config"]


class _Passed:
    """Stands for a switch-off probe known to pass (the fine search's 'bad' is then 'fails')."""
    passed = True
    severity = 0.0


class BudgetSpent(Exception):
    """--max-compiles reached."""


class Search:
    """One bisection run: owns the compile budget, the held-off culprits and the progress output."""

    def __init__(self, case: Any, opts: CheckOptions, max_compiles: int,
                 progress: Callable[[str], None] | None = None, kinds: list[str] | None = None):
        self.case, self.opts, self.max_compiles, self.kinds = case, opts, max_compiles, kinds
        self.progress = progress or (lambda line: None)
        self.compiles = 0
        self.blocked: dict[str, set[str]] = {k: set() for k in GATES}
        self.lines: list[str] = []
        self.unavailable: dict[str, str] = {}
        self.cheap = 0                  # probes without an Inductor compile (aot_eager_decomp_partition)
        self.attributed = 0             # compiles spent on per-kernel attribution
        self.inert: set[str] = set()    # families whose switch-off changed no number: not re-probed
        self.cheap_clear: set[str] | None = None  # held-off decompositions with which they alone passed

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

    def probe(self, capture: bool = False, backend: str = "inductor", **plan_args: Any) -> Trial:
        if self.compiles >= self.max_compiles:
            raise BudgetSpent
        self.compiles += 1
        if backend != "inductor":
            self.cheap += 1
        trial = run_trial(self.case, self.opts.replace(backend=backend), self.plans(**plan_args), kinds=self.kinds,
                          capture=capture)
        self.unavailable.update(trial.unavailable)
        return trial

    # -- stages ----------------------------------------------------------------------------------
    def fine_cost(self, fam: str, current: Trial) -> int:
        """Compiles the fine search and its confirmation need for `fam` (a lone decision needs none)."""
        if len(current.decisions[fam]) == 1:
            return 0
        return math.ceil(math.log2(max(1, len(acting(current.decisions[fam]))))) + 1

    def switch_off(self, fam: str, current: Trial) -> Trial:
        """One probe with `fam` switched off; a family whose switch-off moved no number is marked inert."""
        t = self.probe(off=fam)
        verdict = "PASS" if t.passed else (f"compile error: {t.error[:200]}" if t.error
                                           else f"FAIL severity {t.severity:.3g}")
        self.say("coarse", f"suspect={fam} ({len(current.decisions[fam])} decisions) off -> {verdict}")
        rows = t.summary().get("rows")
        if not t.error and rows and rows == current.summary().get("rows"):
            self.inert.add(fam)   # not a bit of the error moved: this family cannot matter
        return t

    def split(self, current: Trial) -> tuple[list[str], list[str], list[tuple[str, Trial]], Trial | None] | None:
        """Where the error enters, from one probe: lowering switched off runs the graph that decompositions
        and graph passes produced op by op through aten kernels, as eager would. If that is still worse than
        eager, a graph rewrite introduces the error (GRAPH_LEVEL families; code generation families are
        probed only if none of those fixes it); if it passes, Inductor's code generation does (CODEGEN
        families, lowering itself among the passing ones). Returns (families to probe, families to probe only if none of those
        passes, passing switch-offs, a partial one); None when lowering cannot be switched off here."""
        if not current.decisions.get("lowering") or "lowering" in self.inert:
            return None
        t = self.switch_off("lowering", current)
        if t.error:
            return None
        if t.passed:
            self.say("coarse", "the graph run op by op passes: code generation introduces the error; "
                     "graph rewrites (" + ", ".join(GRAPH_LEVEL) + ") not probed")
            return CODEGEN, [], [("lowering", t)], None
        # decompositions that passed alone (step 2) can still introduce an error together with a graph
        # pass: their switch-off is probed only when no other graph rewrite family fixes the verdict
        cleared = self.cheap_clear == self.blocked["decomposition"]
        graph = [f for f in GRAPH_LEVEL if f != "decomposition" or not cleared]
        self.say("coarse", "the graph run op by op fails: a graph rewrite introduces the error; code generation "
                 "(" + ", ".join(f for f in CODEGEN) + ") not probed"
                 + ("" if "decomposition" in graph else "; decompositions alone passed without Inductor"))
        # if no graph rewrite fixes it after all, the rest are probed rather than giving up
        rest = (["decomposition"] if cleared else []) + CODEGEN
        return graph, rest, [], (t if t.severity < current.severity else None)

    def coarse(self, current: Trial) -> list[tuple[str, Trial]]:
        """Families switched off, one probe each, among those the split (above) leaves, in pipeline order;
        all of them (FAMILY_ORDER) where it cannot be made. After the split, the stage stops once a family
        passes whose switch-off left the acting decisions of every family not yet probed as they were: it
        enables none of them, and a downstream family cannot enable an upstream one. Otherwise every family
        is probed while the budget still leaves room to search the first passing one. Returns the passing
        families, else the one that lowers the severity most, else nothing."""
        split = self.split(current)
        fams, last, passing, partial = split or (FAMILY_ORDER, [], [], None)
        known = len(passing)   # the split probe's own passing lowering switch-off: it enables all code generation
        best: tuple[str, Trial] | None = ("lowering", partial) if partial else None
        skipped: list[str] = []
        inert = [f for f in fams if f in self.inert and current.decisions.get(f)]
        if inert:
            self.say("coarse", f"not re-probed ({', '.join(inert)}): switching them off changed no number before")
        todo = [f for f in fams if current.decisions.get(f) and f not in self.inert and f not in dict(passing)]
        last = [f for f in last if current.decisions.get(f)]
        while todo or (last and not passing):
            fam = (todo or last).pop(0)
            found = passing[known:]
            if found and self.max_compiles - self.compiles - 1 < self.fine_cost(found[0][0], current):
                skipped.append(fam)
                continue
            t = self.switch_off(fam, current)
            if t.passed:
                passing.append((fam, t))
            elif not t.error and t.severity < current.severity and (best is None or t.severity < best[1].severity):
                best = (fam, t)
            found = passing[known:]
            if split and found and todo and not any(evidence.removed(current, off, f)
                                                    for f in todo for _, off in found):
                self.say("coarse", f"not probed ({', '.join(todo)}): {found[0][0]} switched off passes and "
                         "leaves their decisions as they were (it enables none of them)")
                break
        if skipped:
            self.say("coarse", f"not probed ({', '.join(skipped)}): budget kept for searching {passing[known][0]}")
        return passing or ([best] if best else [])

    def fine(self, fam: str, off: Trial, current: Trial, backend: str = "inductor") -> Decision:
        """Smallest k such that allowing the first k *acting* decisions of `fam` is bad; the culprit is
        acting decision k-1. A probe that does not compile counts as bad (the refusal it needs is not the
        culprit's)."""
        decisions = acting(current.decisions[fam])
        if off.passed:
            bad = lambda t: not t.passed  # noqa: E731
        else:  # partial: the decision that carries the error past the (geometric) midpoint
            hi_s = current.severity if math.isfinite(current.severity) else off.severity * 1e6
            threshold = math.sqrt(max(off.severity, 1e-30) * hi_s)
            bad = lambda t: t.severity > threshold  # noqa: E731
        lo, hi = 0, len(decisions)
        total = len(current.decisions[fam])
        while hi - lo > 1:
            mid = (lo + hi) // 2
            # allow every decision before the mid-th acting one (those between acting ones changed nothing)
            t = self.probe(limit=(fam, decisions[mid].index), backend=backend)
            is_bad = bad(t)
            what = f"compile error: {t.error[:200]}" if t.error else f"severity {t.severity:.3g}"
            self.say("fine", f"{'[no Inductor] ' if backend != 'inductor' else ''}suspect={fam} allow first "
                     f"{mid}/{len(decisions)} acting ({decisions[mid].index}/{total} decisions) -> "
                     f"{'bad' if is_bad else 'good'} ({what})")
            if is_bad:
                hi = mid
            else:
                lo = mid
        return decisions[hi - 1]

    def confirm(self, fam: str, decision: Decision, off: Trial, current: Trial, force: bool = False) -> Trial:
        """One probe with the suspect held off; a family of one decision reuses its switch-off probe."""
        self.blocked[fam].add(decision.key)
        if len(current.decisions[fam]) == 1 and not force:
            return off
        try:
            return self.probe()
        except BudgetSpent:
            self.blocked[fam].discard(decision.key)
            raise

    def decompositions_first(self, current: Trial, culprits: list[Culprit]) -> Trial:
        """Decomposition culprits without an Inductor compile: one probe with aot_eager_decomp_partition
        (Inductor's decomposition table, graph run eagerly). If even that is worse than eager, a
        decomposition introduces the error: it is bisected with such probes and confirmed by one Inductor
        compile. If it passes, decompositions can only enable something, and the coarse stage decides."""
        decisions = current.decisions.get("decomposition") or []
        if len(decisions) < 1 or (self.kinds and "decomposition" not in self.kinds):
            return current
        cheap = self.probe(backend="aot_eager_decomp_partition")
        self.say("decomp", f"aot_eager_decomp_partition (no Inductor): "
                 + ("PASS" if cheap.passed else f"compile error: {cheap.error[:160]}" if cheap.error
                    else f"FAIL severity {cheap.severity:.3g}: a decomposition introduces an error"))
        if cheap.passed:
            self.cheap_clear = set(self.blocked["decomposition"])
        if cheap.passed or cheap.error or not cheap.decisions.get("decomposition"):
            return current
        decision = self.fine("decomposition", _Passed(), cheap, backend="aot_eager_decomp_partition")
        after = self.confirm("decomposition", decision, _Passed(), current, force=True)
        self.say("confirm", f"decomposition #{decision.index}: {decision.name} -> held off (Inductor): "
                 f"{'PASS' if after.passed else 'FAIL'} severity {current.severity:.3g} -> {after.severity:.3g}")
        if not (after.passed or after.severity < current.severity):
            self.blocked["decomposition"].discard(decision.key)
            return current
        culprits.append(Culprit(decision, not after.passed, current.summary(), after.summary(), False))
        return after

    def choose(self, current: Trial, candidates: list[tuple[str, Trial]]) -> tuple[Culprit | None, Trial | None]:
        """Fine-search the candidate families in order; the first whose culprit alone passes wins, else the
        one that improves most. Families whose switch-off also passed are reported as alternatives."""
        found: list[tuple[Culprit, Trial]] = []
        enabling: dict[str, set[str]] = {}
        passing = [(f, t) for f, t in candidates if t.passed]
        if len(passing) > 1:
            ranked, enabling = evidence.order(current, passing)
            candidates = ranked + [(f, t) for f, t in candidates if not t.passed]
            self.say("evidence", "introducer first: " + ", ".join(
                f"{f} (footprint {evidence.footprint(current, t, f)}"
                + (f"; switched off, removes {', '.join(sorted(enabling[f]))} decisions" if enabling[f] else "")
                + ")" for f, t in ranked))
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
        candidates = candidates + self.decomposition_evidence(culprit, current, candidates)
        self.blocked[culprit.decision.kind].add(culprit.decision.key)
        searched = {c.decision.kind for c, _ in found}
        others = [(f, t) for f, t in candidates if t.passed and f not in searched]
        hides = [(f, t) for f, t in others if culprit.decision.kind in enabling.get(f, ())
                 or culprit.decision.key not in evidence.acting(t, culprit.decision.kind)]
        culprit.enabled_by = [evidence.why_hidden(culprit.decision, f, t) for f, t in hides]
        if culprit.enabled_by:
            self.say("culprit", culprit.chain)
        culprit.alternatives = [f"{f} (switched off, also passes)" for f, t in others if (f, t) not in hides] + \
            [f"{c.decision.kind}: {c.decision.name} (held off alone: {'PASS' if t.passed else 'partial'})"
             for c, t in found if c is not culprit]
        if culprit.alternatives:
            self.say("culprit", "alternatives: " + "; ".join(culprit.alternatives))
        return culprit, after


    def decomposition_evidence(self, culprit: Culprit, current: Trial,
                               probed: list[tuple[str, Trial]]) -> list[tuple[str, Trial]]:
        """A graph rewrite that rewrote nodes some decomposition produced (`sources`) may only fire on
        decomposed graphs. When decompositions were not switched off in this round (they passed alone),
        one probe switches them off with the culprit allowed, so the report can say whether refusing
        the decomposition hides it (the rewrite is then not made) rather than assert it."""
        if not culprit.decision.sources or "decomposition" in dict(probed) \
                or not current.decisions.get("decomposition"):
            return []
        try:
            t = self.probe(off="decomposition")
        except BudgetSpent:
            return []
        same = [d for d in t.decisions.get(culprit.decision.kind, []) if d.key == culprit.decision.key]
        self.say("evidence", f"decompositions off, {culprit.decision.kind} #{culprit.decision.index} allowed -> "
                 f"{'PASS' if t.passed else 'FAIL'}; it " + ("rewrites " + ", ".join(same[0].fx_nodes[:6])
                                                          if same and same[0].acted else "makes no rewrite"))
        return [("decomposition", t)]


def acting(decisions: list[Decision]) -> list[Decision]:
    """The decisions that changed something in that compile (a graph pass that rewrote no node did not):
    only these can introduce an error, so the fine search bisects over them alone. All, if none acted."""
    return [d for d in decisions if d.acted] or list(decisions)


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


def bisect(case: Any, opts: CheckOptions | None = None, *, kinds: list[str] | None = None, max_compiles: int = 40,
           attribution: bool = True, progress: Callable[[str], None] | None = None,
           repro: str | None = None) -> BisectResult:
    """Find the compiler decisions (of the families `kinds`, default all) that make `case` compiled worse
    than eager against the golden. `opts` are the check's (Inductor is the backend searched)."""
    import time

    t0 = time.perf_counter()
    s = Search(case, (opts or CheckOptions()).replace(backend="inductor"), max_compiles, progress, kinds)
    culprits: list[Culprit] = []
    kernel_rows: list[Any] = []

    def attribute_kernels(base: Trial) -> None:
        """Per-kernel attribution after the search, in the compiles the search left (one per captured graph)."""
        from fusecheck.bisect.attribution import attribute
        budget = min(4, max_compiles - s.compiles)   # one compile per captured graph
        if budget <= 0:
            s.say("kernels", "per-kernel attribution skipped: --max-compiles spent")
            return
        rows, notes, used = attribute(base.captured, base.report.census, base.report.policy, max_kernels=budget)
        s.compiles += used
        s.attributed += used
        kernel_rows.extend(rows)
        worse = [r for r in rows if r.worse]
        s.say("kernels", f"{len(rows)} kernel outputs judged alone ({used} compiles); worse than eager: "
              + (", ".join(f"{r.kernel} ({r.output})" for r in worse) or "none")
              + "".join(f"; {n}" for n in notes))

    def done(status: str, message: str, base: Trial | None, final: Trial | None) -> BisectResult:
        if attribution and base is not None and base.report is not None and not base.passed \
                and base.report.compiled_repeatable:
            attribute_kernels(base)
        if repro and status == "culprits":
            from fusecheck.bisect.backend_bisect import inductor_repro
            try:  # a diagnostic after the verdict: its failure is said, and the bisection's result stands
                s.compiles += inductor_repro(case, s.opts, repro, max_compiles - s.compiles, s.say)
            except Exception as exc:  # noqa: BLE001
                s.say("repro", f"not written: splitting the graph failed ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0][:200]})")
        s.say("done", message)
        census = getattr(base.report, "census", None) if base and base.report else None
        for c in culprits:
            c.kernels = kernels_of(census, c.decision)
        from fusecheck.bisect.attribution import mark_culprits
        mark_culprits(kernel_rows, culprits)   # the attribution names the kernels each culprit landed in
        return BisectResult(status, message, base.summary() if base else None, culprits, s.compiles, max_compiles,
                            {k: len(v) for k, v in (base.decisions if base else {}).items()},
                            final.summary() if final else None, s.unavailable, kernel_rows,
                            time.perf_counter() - t0, s.lines, s.cheap, s.attributed)

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
        current = s.decompositions_first(current, culprits)
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
