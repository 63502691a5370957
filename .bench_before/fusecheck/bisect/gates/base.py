"""Decision gates: each counts one kind of compiler decision in a deterministic order and can refuse some.

A gate sees every decision of its kind during one compile, numbers it (0, 1, 2, ... in the order Inductor
makes it) and asks its `Plan` whether the decision may go ahead: the first `limit` decisions are allowed,
later ones are refused, and `blocked` keys (culprits already found and held off) are always refused and
not numbered. Because Inductor is deterministic, the first `limit` decisions of a run are exactly the first
`limit` decisions of the unrestricted run, which is what makes "allow the first k" bisectable.
"""
from __future__ import annotations

import collections
import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator


class GateUnavailable(RuntimeError):
    """The installed torch lacks what a gate patches; the gate is skipped and the report says why."""


@dataclass
class Decision:
    """One compiler decision as a gate saw it: what it was and which FX nodes it touched."""

    kind: str
    index: int           # order among the non-blocked decisions of this kind in one compile
    key: str             # stable identity across compiles (used to hold a culprit off)
    name: str            # human-readable: "fuse buf1 + buf2", "decompose aten.var_mean.correction"
    fx_nodes: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    graph: int = 0       # which Inductor graph of the compile (forward, backward, graph breaks)
    allowed: bool = True
    kernels: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "index": self.index, "key": self.key, "name": self.name,
                "fx_nodes": self.fx_nodes, "ops": self.ops, "graph": self.graph, "allowed": self.allowed,
                "kernels": self.kernels}


@dataclass
class Plan:
    """What a gate lets through: the first `limit` decisions (None: all) minus the `blocked` keys."""

    limit: int | None = None
    blocked: frozenset[str] = frozenset()


class DecisionLog:
    """Per-compile numbering shared by the gates; keys repeated within one compile get #1, #2 suffixes."""

    def __init__(self, plans: dict[str, Plan]):
        self.plans = plans
        self.decisions: dict[str, list[Decision]] = collections.defaultdict(list)
        self._by_key: dict[tuple[str, str], Decision] = {}
        self._seen: collections.Counter = collections.Counter()
        self._graphs: list[Any] = []  # strong refs: ids of live objects only

    def graph_ordinal(self, graph: Any) -> int:
        """0, 1, ... for each Inductor GraphLowering met in this compile (forward, backward, breaks)."""
        for i, g in enumerate(self._graphs):
            if g is graph:
                return i
        self._graphs.append(graph)
        return len(self._graphs) - 1

    def next_graph(self) -> int:
        """The ordinal the next GraphLowering will get: post-grad passes run on a graph just before
        Inductor lowers it (joint-graph passes: just before its forward), so this names their graph."""
        return len(self._graphs)

    def decide(self, kind: str, key: str, name: str, fx_nodes=(), ops=(), *, dedupe: bool = False,
               graph: Any = None, ordinal: int | None = None) -> bool:
        """Number the decision and say whether it may go ahead. `dedupe`: the same key asked again in
        this compile is the same decision (Inductor re-asks about a fusion pair). `graph`: the
        GraphLowering the decision belongs to, when there is one; `ordinal`: its number, when the
        GraphLowering does not exist yet."""
        g = self.graph_ordinal(graph) if graph is not None else (ordinal or 0)
        key = f"g{g}:{key}" if graph is not None or ordinal is not None else key
        if dedupe and (kind, key) in self._by_key:
            return self._by_key[(kind, key)].allowed
        if not dedupe:
            n = self._seen[(kind, key)]
            self._seen[(kind, key)] += 1
            key = key if n == 0 else f"{key}#{n}"
        plan = self.plans.get(kind, Plan())
        if key in plan.blocked:
            return False
        own = self.decisions[kind]
        allowed = plan.limit is None or len(own) < plan.limit
        d = Decision(kind, len(own), key, name, list(fx_nodes), list(ops), g, allowed)
        own.append(d)
        self._by_key[(kind, key)] = d
        return allowed


@dataclass(frozen=True)
class Gate:
    """Registry entry: a decision kind, what "switched off" means, and how to install the counting hook."""

    kind: str
    doc: str
    install: Callable[[DecisionLog], ContextManager[None]]


@contextlib.contextmanager
def nothing() -> Iterator[None]:
    yield
