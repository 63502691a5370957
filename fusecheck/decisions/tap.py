"""Compiled's choices, read from its own graph: the indices of each decision become extra graph outputs.

Why: a compiled graph's intermediates are invisible, and the choice compiled made at a near-tie is exactly
what the golden must follow. Exposing the indices (already materialised: every consumer of a routing
decision reads them) is the smallest change to what is compiled; the caller sees the graph's own outputs.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import torch

from fusecheck.decisions.ops import DYNAMO_NAMES


def _name(node: torch.fx.Node) -> str | None:
    if node.op == "call_method":
        return str(node.target)
    if node.op == "call_function":
        return getattr(node.target, "__name__", None)
    return None


def _index_value(node: torch.fx.Node) -> tuple[int | None, bool]:
    """(position of the indices in the node's result, whether the node is a decision)."""
    name = _name(node)
    if name not in DYNAMO_NAMES:
        return None, False
    ex = node.meta.get("example_value")
    at = DYNAMO_NAMES[name]
    if at is None:
        return None, isinstance(ex, torch.Tensor) and ex.dtype == torch.int64
    ok = isinstance(ex, tuple) and len(ex) > at and isinstance(ex[at], torch.Tensor) and ex[at].dtype == torch.int64
    return at, ok


def tap_graph(gm: torch.fx.GraphModule) -> int:
    """Append the indices of every decision node to the graph's outputs; returns how many were added."""
    out_node = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if out_node is None or not isinstance(out_node.args[0], (tuple, list)):
        return 0
    taps = []
    for node in list(gm.graph.nodes):
        at, ok = _index_value(node)
        if not ok:
            continue
        if at is None:
            taps.append(node)
        else:
            with gm.graph.inserting_after(node):
                taps.append(gm.graph.call_function(operator.getitem, (node, at)))
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
