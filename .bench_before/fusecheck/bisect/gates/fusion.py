"""Fusion gate: each scheduler fusion pair, through the shared `fusion_veto` hook.

The hook is asked before Inductor's own legality check and may be asked about a pair several times, so
decisions are keyed by the pair's names and numbered on first sight; allowing an illegal pair is harmless.
"""
from __future__ import annotations

from typing import Any

from fusecheck.bisect.gates.base import DecisionLog, GateUnavailable


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


def install(log: DecisionLog):
    try:
        from fusecheck.passes.hooks import fusion_veto
        from fusecheck.passes.errors import ToggleUnsupported
    except ImportError as exc:
        raise GateUnavailable(f"fusion gate needs fusecheck.passes.hooks: {exc}") from exc
    from torch._inductor.virtualized import V

    def veto(node1: Any, node2: Any, kind: str) -> bool:
        a, b = node1.get_name(), node2.get_name()
        graph = V.graph if V.graph is not None else None
        o1, o2 = origins(node1), origins(node2)
        fx = o1 + [n for n in o2 if n not in o1]
        name = f"{kind} fusion of [{', '.join(o1)}] + [{', '.join(o2)}] ({a} + {b})"
        allowed = log.decide("fusion", f"{a}+{b}", name, fx, _ops(node1) + _ops(node2),
                             dedupe=True, graph=graph)
        return not allowed

    try:
        return fusion_veto(veto, toggle="bisect.fusion")
    except ToggleUnsupported as exc:
        raise GateUnavailable(str(exc)) from exc
