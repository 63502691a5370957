"""Registry of pure data-movement ops. A captured graph made only of these must be bitwise equal to eager.

Why a registry: backends differ in which spelling of an op appears (aten overload, torch function,
Tensor method); each spelling is one entry here, and callers ask `is_movement_graph(gm)`.
"""
from __future__ import annotations

import operator

import torch

# Tensor method / function names that only move or copy data.
MOVEMENT_NAMES: frozenset[str] = frozenset({
    "view", "reshape", "permute", "transpose", "t", "contiguous", "flatten", "unflatten", "squeeze",
    "unsqueeze", "expand", "expand_as", "broadcast_to", "narrow", "select", "slice", "split",
    "split_with_sizes", "chunk", "unbind", "cat", "concat", "concatenate", "stack", "clone", "movedim",
    "moveaxis", "swapaxes", "swapdims", "flip", "roll", "repeat", "tile", "index_select", "gather",
    "getitem", "alias", "view_as", "hstack", "vstack", "as_strided", "diagonal", "tensor_split",
    "_unsafe_view", "detach", "rot90", "masked_select", "take_along_dim",
})

MOVEMENT_FUNCTIONS = {operator.getitem}


def _target_name(target) -> str:
    if isinstance(target, str):
        return target
    if isinstance(target, torch._ops.OpOverload):
        return target._opname
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::")[-1]
    return getattr(target, "__name__", str(target))


def is_movement_node(node: torch.fx.Node) -> bool:
    if node.op in ("placeholder", "output", "get_attr"):
        return True
    if node.op not in ("call_function", "call_method"):
        return False
    if node.target in MOVEMENT_FUNCTIONS:
        return True
    return _target_name(node.target).rstrip("_") in MOVEMENT_NAMES


def compute_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if not is_movement_node(n)]


def is_movement_graph(gm: torch.fx.GraphModule) -> bool:
    """True when the graph has at least one op and every op is data movement."""
    ops = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    return bool(ops) and not compute_nodes(gm)
