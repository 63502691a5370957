"""Introducing vs enabling: when several families' switch-offs each fix the verdict, which one introduces
the error and which only enables or exposes it, decided from what the probes observed, not a family order.

Evidence used (all from decision logs the gates already keep, no extra compile):
* **removal**: switching family A off removes decisions of family B that acted in the failing compile (a
  pass that rewrote nodes rewrites none, two nodes once fused stay apart, a node still lowered is no longer
  inlined; a decision about nodes A's switch-off took out of the graph is not removed, only renamed). Then
  A enables B: B's decision cannot
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
    """Decisions of `fam` that acted in the failing compile and that the switch-off probe `off` prevented:
    not just renamed by a changed graph (see `still_made`)."""
    return {d.key for d in failing.decisions.get(fam, []) if d.acted and not still_made(d, off)}


def still_made(d: Decision, off: Any) -> bool:
    """Is the failing compile's decision `d` still made in the probe `off`? A fusion is, if some fusion
    there joins a node of its one side with a node of its other (the sides are named by FX origins, which
    change as nodes merge differently); an inlining or lowering of a node `off` never lowers is about a
    node that switch-off removed from the graph (it changed the graph, it did not refuse the decision);
    anything else by its key."""
    from fusecheck.bisect.gates.fusion import parse_key

    pair = parse_key(d.key) if d.kind == "fusion" else None
    if pair is not None:
        g, left, right = pair
        for e in off.decisions.get("fusion", []):
            other = parse_key(e.key) if e.acted else None
            if other and other[0] == g and ((left & other[1] and right & other[2]) or
                                            (left & other[2] and right & other[1])):
                return True
        return False
    lowered = {e.key.split("#")[0] for e in off.decisions.get("lowering", [])}
    if d.kind in ("inlining", "lowering") and lowered and d.key.split("#")[0] not in lowered:
        return True
    return d.key in acting(off, d.kind)


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
