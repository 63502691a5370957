"""Compiled's choices, read from its own graph: each decision's choice becomes an extra graph output.

Why: a compiled graph's intermediates are invisible, and the choice compiled made at a near-tie is exactly
what the golden must follow. Routing indices are already materialised (every consumer reads them); a relu's
mask is `output > 0` and a max-pool's argmax the same pooling with indices, computed from the same buffer
(their backward reads the same). The caller sees the graph's own outputs only.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from fusecheck.golden.choices.ops import DYNAMO_TAPS


def _name(node: torch.fx.Node) -> str | None:
    if node.op == "call_method":
        return str(node.target)
    if node.op == "call_function":
        return getattr(node.target, "__name__", None)
    return None


def decision_nodes(gm: torch.fx.GraphModule, among=DYNAMO_TAPS) -> list[str]:
    """Names of the graph's decision nodes (what `tap_graph` would tap), of the kinds `among` names."""
    return [n.name for n in gm.graph.nodes if _name(n) in among]


def tap_graph(gm: torch.fx.GraphModule) -> int:
    """Append the choice of every decision node to the graph's outputs; returns how many were added."""
    out_node = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if out_node is None or not isinstance(out_node.args[0], (tuple, list)):
        return 0
    taps = []
    for node in list(gm.graph.nodes):
        tap = DYNAMO_TAPS.get(_name(node))
        if tap is None:
            continue
        with gm.graph.inserting_after(node):
            added = tap(gm.graph, node, node.meta.get("example_value"))
        if added is not None:
            taps.append(added)
    if not taps:
        return 0
    outs = out_node.args[0]
    out_node.args = (type(outs)([*outs, *taps]),)
    gm.recompile()
    return len(taps)


def stripping(compiled: Callable[..., Any], extra: int, log: list[torch.Tensor]) -> Callable[..., Any]:
    """`compiled` with its last `extra` outputs moved into `log` (cloned: a cudagraph reuses its buffers)."""
    def call(*args):
        out = compiled(*args)
        n = len(out) - extra
        log.extend(t.detach().clone() for t in out[n:])
        return type(out)(out[:n]) if isinstance(out, tuple) else list(out[:n])
    # dynamo passes boxed inputs to callables that say so; keep what the backend's callable said
    if getattr(compiled, "_boxed_call", False):
        call._boxed_call = True
    return call
