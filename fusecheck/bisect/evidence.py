"""Introducing vs enabling: when several families' switch-offs each fix the verdict, which one introduces
the error and which only enables or exposes it, decided from what the probes observed, not a family order.

Evidence used (all from decision logs the gates already keep, no extra compile):
* **removal**: switching family A off removes decisions of family B that acted in the failing compile (a
  pass that rewrote nodes rewrites none, a fusion is never asked). Then A enables B: B's decision cannot
  introduce anything without A, and B is searched first.
* **footprint** (smallest intervention): how many acting decisions a switch-off changes against the failing
  compile: its own, plus those of every other family that appear or disappear. Among families that no
  other passing family enables, the smaller footprint is searched first.
"""
from __future__ import annotations

from typing import Any

from fusecheck.bisect.gates import Decision


def acting(trial: Any, fam: str) -> set[str]:
    return {d.key for d in trial.decisions.get(fam, []) if d.acted}


def removed(failing: Any, off: Any, fam: str) -> set[str]:
    """Decisions of `fam` that acted in the failing compile but not in the switch-off probe `off`."""
    return acting(failing, fam) - acting(off, fam)


def footprint(failing: Any, off: Any, fam: str) -> int:
    others = set(failing.decisions) | set(off.decisions)
    return len(acting(failing, fam)) + sum(len(acting(failing, f) ^ acting(off, f)) for f in others if f != fam)


def enables(failing: Any, passing: list[tuple[str, Any]]) -> dict[str, set[str]]:
    """family -> the other passing families whose acting decisions its switch-off removes (one-way only)."""
    gone = {a: {b for b, _ in passing if b != a and removed(failing, off, b)} for a, off in passing}
    return {a: {b for b in bs if a not in gone[b]} for a, bs in gone.items()}


def order(failing: Any, passing: list[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], dict[str, set[str]]]:
    """Passing families, the likely introducers first: not enabling another passing family, then the
    smallest footprint. Returns the order and the enabling relation (for the report)."""
    en = enables(failing, passing)
    ranked = sorted(passing, key=lambda p: (bool(en[p[0]]), footprint(failing, p[1], p[0])))
    return ranked, en


def why_hidden(culprit: Decision, enabler: str, off: Any) -> str:
    """One line: how switching `enabler` off hides the culprit, from what its switch-off probe saw."""
    same = next((d for d in off.decisions.get(culprit.kind, []) if d.key == culprit.key), None)
    if same is None:
        effect = "the decision is never made"
    elif not same.acted:
        effect = "it makes no rewrite"
    else:
        return f"refusing {enabler} also hides it (the decision is still made; an interaction)"
    hint = ""
    if enabler == "decomposition" and culprit.sources:
        ours = [d.name for d in off.decisions.get("decomposition", []) if set(d.ops) & set(culprit.sources)]
        hint = f" {', '.join(sorted(set(ours)))}" if ours else f" of {', '.join(culprit.sources)}"
        return (f"refusing decomposition{hint} hides it because {culprit.name.split(' (graph')[0]} only matches "
                f"its output: with decompositions off {effect}")
    return f"refusing {enabler} hides it: with {enabler} switched off {effect}"
