"""Any backend, golden-aware: split the captured FX graph down to the smallest subgraph the backend makes
worse than eager (torch's accuracy minifier does this against eager; here each piece is judged against its
fp64 golden by the core `compare`, so a backend that only changes bits is never blamed).

Each piece is a window of consecutive graph nodes, cut out with its inputs taken from an eager replay of the
whole graph; it is run eagerly (reference), through the backend (compiled) and in fp64 on the same inputs
upcast (golden). Search: the shortest failing prefix (its last node introduces the error: ⌈log2 N⌉ backend
compiles), then the latest start that still fails (⌈log2 N⌉ more): the window is that op's subgraph.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx as fx

from fusecheck.compare import compare
from fusecheck.runs.cast import cast_model, cast_tree

_COMPUTE = ("call_function", "call_method")


class _Spent(Exception):
    """The splitting budget ran out."""


@dataclass
class Window:
    """Nodes [start, stop) of the graph's compute nodes, cut out as a standalone GraphModule."""
    start: int
    stop: int
    gm: fx.GraphModule
    inputs: list[Any]
    nodes: list[str]
    ops: list[str]
    outputs: list[str]


@dataclass
class Judgement:
    failed: bool
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None

    @property
    def worst_ratio(self) -> float:
        return max((r["error_ratio"] or 0.0 for r in self.rows.values()), default=0.0)


def capture_graph(model: Any, inputs: tuple, kwargs: dict | None = None) -> list[tuple[fx.GraphModule, list[Any]]]:
    """The FX graphs dynamo hands a backend, with the real inputs each was first called with."""
    graphs: list[tuple[fx.GraphModule, list[Any]]] = []

    def recorder(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        graphs.append((gm, [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in example_inputs]))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():  # static shapes: a frame called at two lengths (an encoder's and a decoder's) would
        # otherwise be captured with symbolic sizes, which the eager replay of its graph cannot run
        torch.compile(model, backend=recorder, dynamic=False)(*inputs, **(kwargs or {}))
    torch._dynamo.reset()
    return graphs


def op_name(n: fx.Node) -> str:
    t = n.target
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


class Replay(fx.Interpreter):
    """Eager replay that keeps every node's value (the inputs of any window)."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        self.values: dict[fx.Node, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        self.values[n] = out
        return out


class Splitter:
    def __init__(self, gm: fx.GraphModule, inputs: list[Any], backend: Callable[..., Any], policy: Any,
                 on_probe: Callable[[str], None] = lambda s: None):
        self.gm, self.backend, self.policy, self.on_probe = gm, backend, policy, on_probe
        self.nodes = [n for n in gm.graph.nodes if n.op in _COMPUTE]
        rec = Replay(gm)
        with torch.no_grad():
            rec.run(*inputs)
        self.values = rec.values
        self.compiles = 0

    def window(self, start: int, stop: int) -> Window:
        inside = self.nodes[start:stop]
        names = {n for n in inside}
        g = fx.Graph()
        env: dict[fx.Node, fx.Node] = {}
        args: list[Any] = []
        for n in inside:
            for a in n.all_input_nodes:
                if a not in names and a not in env:
                    env[a] = g.placeholder(a.name)
                    args.append(self.values[a])
            env[n] = g.node_copy(n, lambda a: env[a])
        outs = [n for n in inside if any(u not in names for u in n.users)
                and isinstance(self.values.get(n), torch.Tensor)]
        g.output(tuple(env[n] for n in outs))
        return Window(start, stop, fx.GraphModule(self.gm, g), args, [n.name for n in inside],
                      [op_name(n) for n in inside], [n.name for n in outs])

    def judge(self, w: Window) -> Judgement:
        """The window eager, through the backend, and in fp64: failed when an output is worse than eager."""
        self.compiles += 1
        try:
            with torch.no_grad():
                ref = w.gm(*w.inputs)
                fn = self.backend(copy.deepcopy(w.gm), [a.clone() if isinstance(a, torch.Tensor) else a
                                                        for a in w.inputs])
                got = fn(*w.inputs)
                gold = cast_model(copy.deepcopy(w.gm), torch.float64, None)(*cast_tree(w.inputs, torch.float64))
        except Exception as exc:  # a backend that cannot take this piece: not evidence either way
            return Judgement(False, error=f"{type(exc).__name__}: {str(exc)[:160]}")
        rows, failed = {}, False
        for name, r, c, g in zip(w.outputs, ref, got, gold):
            if not (isinstance(r, torch.Tensor) and r.is_floating_point()):
                continue
            cmp = compare(c, r, g.to(r.dtype) if g.dtype != torch.float64 else g, policy=self.policy, name=name)
            failed |= cmp.verdict.status.value == "FAIL"
            rows[name] = {"status": cmp.verdict.status.value, "code": cmp.verdict.code,
                          "rmse": getattr(cmp.vs_golden, "rmse", None),
                          "eager_rmse": getattr(cmp.reference_vs_golden, "rmse", None),
                          "error_ratio": cmp.error_ratio}
        return Judgement(failed, rows)

    def probe(self, start: int, stop: int) -> tuple[Window, Judgement]:
        if self.compiles >= getattr(self, "budget", 10**9):
            raise _Spent
        w = self.window(start, stop)
        j = self.judge(w)
        self.on_probe(f"nodes {start}..{stop - 1} ({', '.join(w.ops[:4])}{', ...' if len(w.ops) > 4 else ''}) -> "
                      + (f"error: {j.error}" if j.error else ("worse than eager" if j.failed else "not worse")))
        return w, j

    def search(self, budget: int = 10**9) -> tuple[Window, Judgement] | None:
        """Shortest failing prefix, then latest failing start; None when the whole graph is not worse (or
        the budget does not cover the whole graph's probe). Past the budget the smallest failing window
        found so far is returned."""
        n = len(self.nodes)
        if n == 0 or budget < 1:
            return None
        self.budget = budget
        whole, j = self.probe(0, n)
        if not j.failed:
            return None
        self.best = (whole, j)
        try:
            return self._narrow(n)
        except _Spent:
            return self.best

    def _narrow(self, n: int) -> tuple[Window, Judgement]:
        lo, hi = 0, n           # prefix [0, hi) fails, [0, lo) does not (lo = 0: empty)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            w, jm = self.probe(0, mid)
            if jm.failed:
                hi, self.best = mid, (w, jm)
            else:
                lo = mid
        stop = hi
        lo, hi = 0, stop - 1     # start lo fails; the window [stop-1, stop) is the smallest possible
        if hi > lo:
            w, jm = self.probe(hi, stop)
            if jm.failed:
                return w, jm
            while hi - lo > 1:
                mid = (lo + hi) // 2
                w, jm = self.probe(mid, stop)
                if jm.failed:
                    lo, self.best = mid, (w, jm)
                else:
                    hi = mid
        return self.best


def expected_compiles(n: int) -> int:
    return 1 + 2 * math.ceil(math.log2(max(n, 2))) + 1
