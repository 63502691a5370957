"""Lowering gate: each built-in op Inductor lowers into its own IR (rather than calling the aten kernel).

Inductor's run_node asks `fallback_node_due_to_unsupported_type(n)` (a name in torch._inductor.graph)
just before choosing its lowering for a built-in op; answering True makes it call the aten kernel through
a fallback, exactly what torch's own bisector does for its "lowerings" subsystem. View ops are left alone.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

from fusecheck.bisect.gates.base import DecisionLog, GateUnavailable


def install(log: DecisionLog):
    from torch._inductor import graph as graph_mod

    if not callable(getattr(graph_mod, "fallback_node_due_to_unsupported_type", None)):
        raise GateUnavailable("lowering gate needs torch._inductor.graph.fallback_node_due_to_unsupported_type")
    return _patched(graph_mod, log)


@contextlib.contextmanager
def _patched(graph_mod: Any, log: DecisionLog) -> Iterator[None]:
    orig = graph_mod.fallback_node_due_to_unsupported_type
    from torch._inductor.virtualized import V

    @functools.wraps(orig)
    def gated(node: Any, *args: Any, **kwargs: Any) -> bool:
        if orig(node, *args, **kwargs):
            return True
        target = getattr(node, "target", None)
        if getattr(target, "is_view", False) or node.op != "call_function":
            return False
        op = str(target)
        return not log.decide("lowering", node.name, f"lower {node.name} ({op}) with Inductor's lowering",
                              [node.name], [op], graph=V.graph)

    graph_mod.fallback_node_due_to_unsupported_type = gated
    try:
        yield
    finally:
        graph_mod.fallback_node_due_to_unsupported_type = orig
