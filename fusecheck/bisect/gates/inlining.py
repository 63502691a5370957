"""Inlining gate: each FX node whose lowered value stays unrealized and is inlined into its consumers.

Uses the shared `inline_veto` hook; a refused decision realizes the value into its own buffer.
"""
from __future__ import annotations

from typing import Any

import torch

from fusecheck.bisect.gates.base import DecisionLog, GateUnavailable


def install(log: DecisionLog):
    try:
        from fusecheck.toggles.hooks import inline_veto, ir_kind
        from fusecheck.toggles.errors import ToggleUnsupported
    except ImportError as exc:
        raise GateUnavailable(f"inlining gate needs fusecheck.toggles.hooks: {exc}") from exc
    from torch._inductor.virtualized import V

    def veto(n: torch.fx.Node, value: Any) -> bool:
        what = ir_kind(value)
        if what is None or all(u.op == "output" for u in n.users):
            return False
        op = getattr(n.target, "__name__", str(n.target))
        consumers = sorted(u.name for u in n.users)
        allowed = log.decide("inlining", n.name, f"inline {what} {n.name} ({op}) into {', '.join(consumers)}",
                             [n.name, *consumers], [op], graph=V.graph)
        return not allowed

    try:
        return inline_veto(veto, toggle="bisect.inlining")
    except ToggleUnsupported as exc:
        raise GateUnavailable(str(exc)) from exc
