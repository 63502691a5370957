"""A dynamo backend wrapper that records every FX graph the target produces before compiling it.

Graph breaks give several graphs; each is kept with its op counts so the report can list them and the
data-movement rule can be applied.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from fusecheck.golden.choices.tap import stripping, tap_graph
from fusecheck.movement import is_movement_graph


@dataclass
class CapturedGraph:
    index: int
    gm: torch.fx.GraphModule
    n_nodes: int
    op_counts: dict[str, int]
    movement_only: bool

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "n_nodes": self.n_nodes, "op_counts": self.op_counts,
                "movement_only": self.movement_only, "code": self.gm.code}


def _op_name(node: torch.fx.Node) -> str:
    if node.op == "call_module":
        return f"module:{type(node.graph.owning_module.get_submodule(node.target)).__name__}"
    return getattr(node.target, "__name__", str(node.target))


@dataclass
class GraphCapture:
    """Callable dynamo backend: records the graph, then hands it to `backend`. With `decisions` (a list),
    the choice of each decision in the graph (topk/sort/argmax indices, relu masks, max-pool argmaxes) is
    appended to it at every call (decisions/tap.py)."""

    backend: Callable[..., Any]
    graphs: list[CapturedGraph] = field(default_factory=list)
    decisions: list[torch.Tensor] | None = None

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        ops = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
        counts = collections.Counter(_op_name(n) for n in ops)
        self.graphs.append(CapturedGraph(len(self.graphs), gm, len(ops), dict(counts), is_movement_graph(gm)))
        extra = tap_graph(gm) if self.decisions is not None else 0
        compiled = self.backend(gm, example_inputs)
        return stripping(compiled, extra, self.decisions) if extra else compiled

    @property
    def movement_only(self) -> bool:
        return bool(self.graphs) and all(g.movement_only for g in self.graphs)
