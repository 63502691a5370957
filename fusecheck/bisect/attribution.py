"""Per-kernel attribution: each generated kernel judged on its own, against the FX subgraph it came from.

During the baseline compile, `capturing()` keeps every post-grad graph Inductor lowered and the real
inputs its compiled graph was first called with. Afterwards each graph is replayed eagerly (giving every
intermediate value), and every generated kernel in the kernel census (FX node -> kernel, from Inductor's
provenance) has its FX subgraph cut out; all of a graph's pieces are put side by side in one graph (each
reading its own inputs) and run three ways on the same inputs: compiled by Inductor in ONE compile (the
kernels), eagerly in the run dtype (the reference) and eagerly in fp64 (the golden). A failure is one
line per graph, never an internal repr. The core `compare` gives the verdict per kernel output, so kernels worse than eager are
named directly, on CPU as on GPU (no Triton-only intermediate hooks needed).

Extern kernels (`extern_kernels.mm`) are judged too: a lossy graph rewrite often lands in one. The fp64 golden
widens every floating cast (`convert_element_type(x, bf16)` computes in fp64), as the model's golden does, so a
cast a pass inserted shows its rounding instead of `0`. A kernel can only be judged against the graph as it was
lowered: a culprit that rewrote the graph (a pass) is in that graph, so `mark_culprits` names the kernels that
hold each culprit's FX nodes; the bisection has already measured the culprit's effect on the outputs.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import torch.fx as fx

from fusecheck.compare import compare
from fusecheck.runs.cast import cast_tree


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
    culprit: str = ""   # "1": this kernel holds FX nodes of culprit 1 (mark_culprits)

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


def _kernels(census: Any, graph: int) -> list[tuple[str, list[str]]]:
    """Every kernel of the graph with its FX nodes, extern calls (`extern_kernels.mm`) included."""
    return [(census.graph.nodes[kid]["name"], census.fx_nodes_of(kid)) for kid in census.kernels
            if census.graph.nodes[kid]["graph"] == graph]


_CASTS = {"convert_element_type": 1}   # op name -> position of its dtype argument


def widened(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy whose floating casts produce fp64: the golden of a cut-out piece keeps fp64 through a cast that
    a compiler (or a user's pass) inserted, as the model's golden does."""
    import copy
    out = copy.deepcopy(gm)
    for n in out.graph.nodes:
        pos = _CASTS.get(getattr(getattr(n.target, "_schema", None), "name", "").split("::")[-1])
        if pos is not None and len(n.args) > pos and isinstance(n.args[pos], torch.dtype) \
                and n.args[pos].is_floating_point:
            n.args = (*n.args[:pos], torch.float64, *n.args[pos + 1:])
        if n.kwargs.get("dtype") is not None and isinstance(n.kwargs["dtype"], torch.dtype) \
                and n.kwargs["dtype"].is_floating_point:
            n.kwargs = {**n.kwargs, "dtype": torch.float64}
    out.recompile()
    return out


def mark_culprits(rows: list[KernelRow], culprits: list[Any]) -> list[KernelRow]:
    """Mark each row whose kernel holds FX nodes of a culprit (same graph), culprit rows first: the table then
    names the kernel a culprit landed in (a lossy `mm` a user pass wrote), even where that kernel, judged
    against the rewritten graph, matches it."""
    for i, c in enumerate(culprits):
        d = getattr(c, "decision", c)
        nodes = set(d.fx_nodes or ())
        for r in rows:
            if r.graph == (d.graph or 0) and nodes & set(r.fx_nodes):
                r.culprit = ",".join(x for x in (r.culprit, str(i + 1)) if x)
    rows.sort(key=lambda r: not r.culprit)
    return rows


def one_line(exc: BaseException) -> str:
    """An exception as one readable line: no object reprs with addresses, no multi-line dumps."""
    import re
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = re.sub(r"<(function|bound method|class|object)? ?([\w.<>]+?)(?: object)? at 0x[0-9a-f]+>", r"\2", text)
    text = re.sub(r"\[?<function [^\]]*", "...", text)
    if "output spec mismatch" in text:
        text = "output spec mismatch (AOTAutograd re-tracing the cut-out graph changed its outputs)"
    return f"{type(exc).__name__}: {text[:140]}"


def combined(gm: fx.GraphModule, kernels: list[tuple[str, list[str]]], values: dict[str, Any]):
    """Every kernel's FX subgraph side by side in one graph, each reading its own inputs from placeholders:
    one Inductor compile reproduces every kernel's fusion (the pieces share no data, so they cannot fuse
    vertically). Returns (graph module, args, [(kernel, fx names, output name)])."""
    g = fx.Graph()
    args: list[Any] = []
    outs: list[fx.Node] = []
    meta: list[tuple[str, list[str], str]] = []
    for i, (kernel, names) in enumerate(kernels):
        nodes = [n for n in gm.graph.nodes if n.name in set(names) and n.op == "call_function"]
        inside = {n.name for n in nodes}
        env: dict[fx.Node, fx.Node] = {}
        for n in nodes:
            for a in n.all_input_nodes:
                if a.name not in inside and a not in env:
                    env[a] = g.placeholder(f"k{i}_{a.name}")
                    args.append(values[a.name])
            env[n] = g.node_copy(n, lambda a: env[a])
        for n in nodes:
            if any(u.name not in inside for u in n.users) and isinstance(values.get(n.name), torch.Tensor) \
                    and values[n.name].is_floating_point():
                outs.append(env[n])
                meta.append((kernel, sorted(names), n.name))
    g.output(tuple(outs))
    return fx.GraphModule(gm, g), args, meta


def attribute(cap: Captured, census: Any, policy: Any, *,
              max_kernels: int = 16) -> tuple[list[KernelRow], list[str], int]:
    """Judge each generated kernel of the captured compile: all kernels of a graph are re-compiled together
    in one Inductor compile (one per captured graph, at most `max_kernels` graphs). Returns rows, notes (what
    was skipped, one line each) and the compiles used."""
    from torch._inductor.compile_fx import compile_fx

    rows: list[KernelRow] = []
    notes: list[str] = [cap.error] if cap.error else []
    if census is None:
        return rows, notes + ["no kernel census (fusecheck.toggles.census unavailable)"], 0
    done = 0
    for g, gm in enumerate(cap.graphs):
        if g not in cap.inputs:
            notes.append(f"graph {g}: never called, not attributed")
            continue
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(cap.inputs[g]):
            notes.append(f"graph {g}: {len(placeholders)} placeholders but {len(cap.inputs[g])} inputs; skipped")
            continue
        if done >= max_kernels:
            notes.append(f"graph {g}: not attributed (--max-compiles)")
            continue
        rec = _Recorder(gm)
        with torch.no_grad():
            rec.run(*cap.inputs[g])
        sub, args, meta = combined(gm, _kernels(census, g), rec.values)
        if not meta:
            continue
        done += 1  # one compile for every kernel of the graph, whether or not it succeeds
        try:
            with torch.no_grad():
                got_all = compile_fx(sub, [a.clone() if isinstance(a, torch.Tensor) else a for a in args])(*args)
                gold_all = widened(sub)(*cast_tree(args, torch.float64))
        except Exception as exc:  # never leak internals: one line per graph
            notes.append(f"graph {g}: kernels not attributed ({one_line(exc)})")
            continue
        for (kernel, fx_names, name), got, gold in zip(meta, got_all, gold_all):
            ref = rec.values[name]
            note = "kernels re-compiled together from their FX subgraphs"
            if isinstance(got, torch.Tensor) and got.dtype != ref.dtype and got.is_floating_point():
                note += f"; compiled returned {got.dtype} (a pass rewrote the piece again), judged as {ref.dtype}"
                got = got.to(ref.dtype)
            c = compare(got, ref, gold.to(ref.dtype) if gold.dtype != torch.float64 else gold,
                        policy=policy, name=name)
            rows.append(KernelRow(g, kernel, fx_names, name, c.verdict.status.value, c.verdict.code,
                                  getattr(c.vs_golden, "rmse", float("nan")),
                                  getattr(c.reference_vs_golden, "rmse", float("nan")), c.error_ratio, note))
    return rows, notes, done
