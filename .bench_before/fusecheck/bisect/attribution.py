"""Per-kernel attribution: each generated kernel judged on its own, against the FX subgraph it came from.

During the baseline compile, `capturing()` keeps every post-grad graph Inductor lowered and the real
inputs its compiled graph was first called with. Afterwards each graph is replayed eagerly (giving every
intermediate value), and for each generated kernel in the kernel census (FX node -> kernel, from
Inductor's provenance) the kernel's FX subgraph is cut out and run three ways on the same inputs:
compiled alone by Inductor (the kernel), eagerly in the run dtype (the reference) and eagerly in fp64
(the golden). The core `compare` gives the verdict per kernel output, so kernels worse than eager are
named directly, on CPU as on GPU (no Triton-only intermediate hooks needed).
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import torch.fx as fx

from fusecheck.compare import compare
from fusecheck.golden import cast_tree


@dataclass
class KernelRow:
    graph: int
    kernel: str
    fx_nodes: list[str]
    output: str
    status: str
    code: str
    rmse: float
    eager_rmse: float
    ratio: float | None
    note: str = ""

    @property
    def worse(self) -> bool:
        return self.status == "FAIL"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Captured:
    graphs: list[fx.GraphModule] = field(default_factory=list)
    inputs: dict[int, list[Any]] = field(default_factory=dict)
    error: str | None = None


@contextlib.contextmanager
def capturing() -> Iterator[Captured]:
    """Record post-grad graphs (GraphLowering.run) and first-call inputs (CompiledFxGraph.__call__)."""
    cap = Captured()
    try:
        from torch._inductor.graph import GraphLowering
        from torch._inductor.output_code import CompiledFxGraph
    except ImportError as exc:  # pragma: no cover
        cap.error = f"per-kernel attribution needs GraphLowering and CompiledFxGraph: {exc}"
        yield cap
        return
    if not all(hasattr(c, a) for c, a in ((GraphLowering, "run"), (CompiledFxGraph, "__call__"),
                                           (CompiledFxGraph, "__init__"))):
        cap.error = f"per-kernel attribution: torch {torch.__version__} lacks GraphLowering.run/CompiledFxGraph.__call__"
        yield cap
        return
    orig_run, orig_init, orig_call = GraphLowering.run, CompiledFxGraph.__init__, CompiledFxGraph.__call__

    @functools.wraps(orig_run)
    def run(self: Any, *args: Any) -> Any:
        if not getattr(self, "is_const_graph", False) and isinstance(getattr(self, "module", None), fx.GraphModule):
            cap.graphs.append(self.module)
        return orig_run(self, *args)

    @functools.wraps(orig_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        orig_init(self, *args, **kwargs)
        self._fusecheck_graph = len(cap.graphs) - 1

    @functools.wraps(orig_call)
    def call(self: Any, inputs: Any) -> Any:
        g = getattr(self, "_fusecheck_graph", None)
        if g is not None and g not in cap.inputs:
            cap.inputs[g] = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        return orig_call(self, inputs)

    GraphLowering.run, CompiledFxGraph.__init__, CompiledFxGraph.__call__ = run, init, call
    try:
        yield cap
    finally:
        GraphLowering.run, CompiledFxGraph.__init__, CompiledFxGraph.__call__ = orig_run, orig_init, orig_call


class _Recorder(fx.Interpreter):
    """Eager replay that keeps every node's value."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        self.values: dict[str, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        self.values[n.name] = out
        return out


def cut_subgraph(gm: fx.GraphModule, names: set[str]) -> tuple[fx.GraphModule, list[str], list[str]] | None:
    """The subgraph of `names` (call_function nodes), its external input names and its output names."""
    nodes = [n for n in gm.graph.nodes if n.name in names and n.op == "call_function"]
    if not nodes:
        return None
    inside = {n.name for n in nodes}
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    ext: list[str] = []
    for n in nodes:
        for a in n.all_input_nodes:
            if a.name not in inside and a not in env:
                env[a] = g.placeholder(a.name)
                ext.append(a.name)
        env[n] = g.node_copy(n, lambda a: env[a])
    outs = [n for n in nodes if any(u.name not in inside for u in n.users)]
    if not outs:
        return None
    g.output(tuple(env[n] for n in outs))
    return fx.GraphModule(gm, g), ext, [n.name for n in outs]


def _kernels(census: Any, graph: int) -> list[tuple[str, list[str]]]:
    out = []
    for kid in census.kernels:
        d = census.graph.nodes[kid]
        if d["graph"] == graph and not d["extern"]:
            out.append((d["name"], census.fx_nodes_of(kid)))
    return out


def attribute(cap: Captured, census: Any, policy: Any, *,
              max_kernels: int = 16) -> tuple[list[KernelRow], list[str], int]:
    """Judge each generated kernel of the captured compile, at most `max_kernels` compiles (the bisection's
    budget: each kernel is re-compiled). Returns rows, notes (what was skipped) and the compiles used."""
    from torch._inductor.compile_fx import compile_fx

    rows: list[KernelRow] = []
    notes: list[str] = [cap.error] if cap.error else []
    if census is None:
        return rows, notes + ["no kernel census (fusecheck.passes.census unavailable)"], 0
    done = 0
    for g, gm in enumerate(cap.graphs):
        if g not in cap.inputs:
            notes.append(f"graph {g}: never called, not attributed")
            continue
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(cap.inputs[g]):
            notes.append(f"graph {g}: {len(placeholders)} placeholders but {len(cap.inputs[g])} inputs; skipped")
            continue
        rec = _Recorder(gm)
        with torch.no_grad():
            rec.run(*cap.inputs[g])
        for kernel, fx_names in _kernels(census, g):
            if done >= max_kernels:
                notes.append(f"stopped after {max_kernels} kernel compiles (--max-compiles / 16-kernel cap)")
                return rows, notes, done
            cut = cut_subgraph(gm, set(fx_names))
            if cut is None:
                continue
            sub, ext, outs = cut
            args = [rec.values[a] for a in ext]
            done += 1  # a compile, whether or not it succeeds
            try:
                with torch.no_grad():
                    kernel_out = compile_fx(sub, [a.clone() if isinstance(a, torch.Tensor) else a for a in args])(*args)
                    golden_out = sub(*cast_tree(args, torch.float64))
            except Exception as exc:  # one kernel failing to re-run must not hide the others
                notes.append(f"{kernel}: not attributed ({type(exc).__name__}: {str(exc)[:120]})")
                continue
            kernel_out = kernel_out if isinstance(kernel_out, (tuple, list)) else (kernel_out,)
            for name, got, gold in zip(outs, kernel_out, golden_out):
                ref = rec.values[name]
                if not (isinstance(got, torch.Tensor) and got.is_floating_point()):
                    continue
                c = compare(got, ref, gold.to(ref.dtype) if gold.dtype != torch.float64 else gold,
                            policy=policy, name=name)
                rows.append(KernelRow(g, kernel, sorted(fx_names), name, c.verdict.status.value, c.verdict.code,
                                      getattr(c.vs_golden, "rmse", float("nan")),
                                      getattr(c.reference_vs_golden, "rmse", float("nan")), c.error_ratio,
                                      "kernel re-compiled alone from its FX subgraph"))
    return rows, notes, done
