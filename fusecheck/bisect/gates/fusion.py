"""Fusion gate: each scheduler fusion pair, through the shared `fusion_veto` hook, keyed by FX origins.

A decision's key is the set of original (post-grad) FX nodes on each side, not the scheduler names: those
change as nodes merge (`op9 + op10` refused, the scheduler asks `op6_op7_op8_op9 + op10_op11` next). A held-off
pair (L, R) therefore refuses every later fusion whose one side holds all of L and whose other side holds all
of R, so a refused pair stays refused after merges (tested: `test_fusion_pair_inside_chain_stays_refused`).

The hook is asked before Inductor's own legality check and may be asked about a pair several times, so
decisions are numbered on first sight (dedupe); allowing an illegal pair is harmless.
"""
from __future__ import annotations

from typing import Any

from fusecheck.bisect.gates.base import DecisionLog, GateUnavailable

SEP = "|"


def origins(snode: Any) -> list[str]:
    """Post-grad FX node names behind a scheduler node (fused or not), in a stable order."""
    names: set[str] = set()
    for sn in snode.get_nodes():
        ir_node = getattr(sn, "node", None)
        for o in getattr(ir_node, "origins", ()) or ():
            names.add(getattr(o, "name", str(o)))
    return sorted(names)


def _ops(snode: Any) -> list[str]:
    ops: set[str] = set()
    for sn in snode.get_nodes():
        for o in getattr(getattr(sn, "node", None), "origins", ()) or ():
            ops.add(getattr(o.target, "__name__", str(o.target)) if hasattr(o, "target") else str(o))
    return sorted(ops)


def pair_key(o1: list[str], o2: list[str]) -> str:
    return ",".join(o1) + SEP + ",".join(o2)


def parse_key(key: str) -> tuple[int, frozenset[str], frozenset[str]] | None:
    """`g<graph>:a,b|c[#n]` -> (graph, {a, b}, {c}); None for keys of another form."""
    graph, _, rest = key.partition(":")
    if not graph.startswith("g") or SEP not in rest:
        return None
    left, _, right = rest.split("#")[0].partition(SEP)
    return int(graph[1:]), frozenset(filter(None, left.split(","))), frozenset(filter(None, right.split(",")))


def held_off(blocked: frozenset[str], graph: int, o1: set[str], o2: set[str]) -> bool:
    """True when a blocked pair's two sides are contained in the two sides of this fusion (either way)."""
    for key in blocked:
        parsed = parse_key(key)
        if parsed is None or parsed[0] != graph or not (parsed[1] and parsed[2]):
            continue
        _, left, right = parsed
        if (left <= o1 and right <= o2) or (left <= o2 and right <= o1):
            return True
    return False


def install(log: DecisionLog):
    try:
        from fusecheck.toggles.hooks import fusion_veto
        from fusecheck.toggles.errors import ToggleUnsupported
    except ImportError as exc:
        raise GateUnavailable(f"fusion gate needs fusecheck.toggles.hooks: {exc}") from exc
    from torch._inductor.virtualized import V

    keys: dict[tuple[Any, str, str], str] = {}   # (graph, name1, name2) -> origin key, this compile

    def veto(node1: Any, node2: Any, kind: str) -> bool:
        a, b = node1.get_name(), node2.get_name()
        graph = V.graph if V.graph is not None else None
        o1, o2 = origins(node1), origins(node2)
        g = log.graph_ordinal(graph) if graph is not None else 0
        plan = log.plans.get("fusion")
        if plan is not None and held_off(plan.blocked, g, set(o1), set(o2)):
            return True
        key = keys.get((g, a, b))
        if key is None:   # two scheduler pairs with the same origins (split reductions) get #n suffixes
            base = pair_key(o1, o2)
            n = sum(1 for k in keys.values() if k.split("#")[0] == base)
            key = keys[(g, a, b)] = base if n == 0 else f"{base}#{n}"
        fx = o1 + [n for n in o2 if n not in o1]
        name = f"{kind} fusion of [{', '.join(o1)}] + [{', '.join(o2)}] ({a} + {b})"
        allowed = log.decide("fusion", key, name, fx, _ops(node1) + _ops(node2), dedupe=True, graph=graph)
        return not allowed

    try:
        return fusion_veto(veto, toggle="bisect.fusion")
    except ToggleUnsupported as exc:
        raise GateUnavailable(str(exc)) from exc
