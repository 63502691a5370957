"""Kernel census: which FX nodes Inductor put into which kernel, read from Inductor's own provenance.

``collecting_census()`` turns on Inductor's provenance tracking (``config.trace.provenance_tracking_level
= 1``) and hooks ``CompiledFxGraph.post_compile``, which runs for every compiled graph - fresh or loaded
from the FX graph / AOTAutograd cache - and reads the ``cppCodeToPost`` / ``tritonCodeToPost`` map that
Inductor stored with the compiled graph (the map is built from IR ``origins`` during codegen). Cache
entries written without provenance are not reused: census scopes salt the cache key ("census").

On CPU one generated C++ function may hold several loop nests (consecutive scheduler nodes are grouped
into one function unless something forces a flush), and provenance names only the function. Two small
hooks (``KernelGroup.finalize_kernel``, ``CppScheduling.codegen_comment``) add one provenance entry per
loop nest, ``<function>#loop<i>``, to Inductor's own provenance table before it is stored; the census
then counts loop nests - the unit that fusion decides - as kernels, each with a ``function``
attribute. Where those hooks are unavailable, functions count as kernels.

The census is a networkx DiGraph: FX nodes (``kind='fx'``) -> kernels (``kind='kernel'``), with one
subgraph per compiled graph (``graph`` attribute: 0, 1, ... in compile order; forward and backward of a
training step are two graphs). Node ids are ``"g<graph>/<name>"``; FX names are the post-grad node
names, with their pre-grad origins in the ``pre_grad`` attribute.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterator
from unittest import mock

import networkx as nx

from .compat import require_config, require_own
from .errors import ToggleUnsupported
from .salt import salted

_KERNEL_TO_POST = ("cppCodeToPost", "tritonCodeToPost")
LOOP_MARK = "#loop"
_ACTIVE: list["KernelCensus"] = []


def _is_extern(kernel: str) -> bool:
    return kernel.startswith(("extern_kernels.", "aten.", "torch.ops.")) or "::" in kernel


@dataclass
class KernelCensus:
    graph: nx.DiGraph = field(default_factory=nx.DiGraph)
    n_graphs: int = 0
    missing: int = 0  # compiled graphs that came without provenance (should stay 0)
    unavailable: str | None = None  # why no census could be taken with this torch (None: it was)

    # -- filling ---------------------------------------------------------------------------------
    def add_mapping(self, mapping: dict[str, Any] | None) -> None:
        g = self.n_graphs
        self.n_graphs += 1
        if not mapping:
            self.missing += 1
            return
        pre = {}
        for pre_name, posts in mapping.get("preToPost", {}).items():
            for post in posts:
                pre.setdefault(post, []).append(pre_name)
        kernel_map: dict[str, list[str]] = {}
        for key in _KERNEL_TO_POST:
            kernel_map.update(mapping.get(key, {}))
        split = {k.split(LOOP_MARK, 1)[0] for k in kernel_map if LOOP_MARK in k}
        for order, (kernel_key, posts) in enumerate(kernel_map.items()):
            kname = kernel_key.rsplit(":", 1)[0]
            if kname in split:
                continue  # a function whose loop nests are listed separately
            function = kname.split(LOOP_MARK, 1)[0]
            kid = f"g{g}/{kernel_key}"
            self.graph.add_node(
                kid, kind="kernel", name=kname, graph=g, order=order, extern=_is_extern(kname),
                function=function,
            )
            for post in posts:
                fid = f"g{g}/{post}"
                if fid not in self.graph:
                    self.graph.add_node(fid, kind="fx", name=post, graph=g, pre_grad=pre.get(post, []))
                self.graph.add_edge(fid, kid)

    # -- reading ---------------------------------------------------------------------------------
    def _nodes(self, kind: str) -> list[str]:
        return [n for n, d in self.graph.nodes(data=True) if d["kind"] == kind]

    @property
    def kernels(self) -> list[str]:
        """Kernel ids in graph/codegen order."""
        ks = self._nodes("kernel")
        return sorted(ks, key=lambda k: (self.graph.nodes[k]["graph"], self.graph.nodes[k]["order"]))

    @property
    def n_kernels(self) -> int:
        return len(self._nodes("kernel"))

    @property
    def n_extern(self) -> int:
        """Kernels that are calls into aten/extern libraries (mm, fallbacks), not generated."""
        return sum(1 for k in self._nodes("kernel") if self.graph.nodes[k]["extern"])

    @property
    def n_generated(self) -> int:
        return self.n_kernels - self.n_extern

    def fx_nodes_of(self, kernel: str) -> list[str]:
        return [self.graph.nodes[p]["name"] for p in self.graph.predecessors(kernel)]

    @property
    def fused_kernels(self) -> list[str]:
        """Generated kernels that hold two or more FX nodes."""
        return [
            k for k in self.kernels
            if not self.graph.nodes[k]["extern"] and self.graph.in_degree(k) >= 2
        ]

    @property
    def n_fused_kernels(self) -> int:
        return len(self.fused_kernels)

    @property
    def n_fx_nodes_fused(self) -> int:
        """FX nodes that share a generated kernel with at least one other FX node."""
        return len({p for k in self.fused_kernels for p in self.graph.predecessors(k)})

    @property
    def n_functions(self) -> int:
        """Distinct generated functions (on CPU one function may hold several loop-nest kernels)."""
        return len({self.graph.nodes[k]["function"] for k in self._nodes("kernel")})

    @property
    def n_fx_nodes(self) -> int:
        return len(self._nodes("fx"))

    def signature(self) -> list[tuple[int, str, tuple[str, ...]]]:
        """Order-independent summary for equality checks: (graph, kernel name, sorted FX names)."""
        return sorted(
            (self.graph.nodes[k]["graph"], self.graph.nodes[k]["name"], tuple(sorted(self.fx_nodes_of(k))))
            for k in self._nodes("kernel")
        )

    def summary(self) -> str:
        return (
            f"{self.n_kernels} kernels ({self.n_generated} generated, {self.n_extern} extern); "
            f"{self.n_fx_nodes_fused} FX nodes fused into {self.n_fused_kernels} kernels"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_graphs": self.n_graphs,
            "n_kernels": self.n_kernels,
            "n_generated": self.n_generated,
            "n_extern": self.n_extern,
            "n_functions": self.n_functions,
            "n_fx_nodes": self.n_fx_nodes,
            "n_fx_nodes_fused": self.n_fx_nodes_fused,
            "n_fused_kernels": self.n_fused_kernels,
            "missing_provenance": self.missing,
            "unavailable": self.unavailable,
            "kernels": [
                {
                    "id": k,
                    "name": self.graph.nodes[k]["name"],
                    "graph": self.graph.nodes[k]["graph"],
                    "extern": self.graph.nodes[k]["extern"],
                    "fx_nodes": self.fx_nodes_of(k),
                }
                for k in self.kernels
            ],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "KernelCensus":
        c = cls(n_graphs=d.get("n_graphs", 0), missing=d.get("missing_provenance", 0))
        for order, k in enumerate(d.get("kernels", [])):
            c.graph.add_node(k["id"], kind="kernel", name=k["name"], graph=k["graph"], order=order,
                             extern=k["extern"], function=k["name"].split(LOOP_MARK, 1)[0])
            for name in k["fx_nodes"]:
                fid = f"g{k['graph']}/{name}"
                if fid not in c.graph:
                    c.graph.add_node(fid, kind="fx", name=name, graph=k["graph"], pre_grad=[])
                c.graph.add_edge(fid, k["id"])
        return c


def _parse(raw: Any) -> dict[str, Any] | None:
    if not raw:
        return None
    if isinstance(raw, dict):
        return raw
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return None


@contextlib.contextmanager
def _post_compile_hook(cls: type) -> Iterator[None]:
    orig = cls.__dict__["post_compile"]

    def post_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        mapping = _parse(getattr(self, "inductor_provenance_mapping_str", None))
        for census in list(_ACTIVE):
            census.add_mapping(mapping)
        return orig(self, *args, **kwargs)

    cls.post_compile = post_compile
    try:
        yield
    finally:
        cls.post_compile = orig


@contextlib.contextmanager
def _cpp_loop_hooks() -> Iterator[None]:
    """Record loop-nest boundaries inside CPU kernel groups as extra provenance entries."""
    try:
        from torch._inductor import debug
        from torch._inductor.codegen import cpp
    except ImportError:  # pragma: no cover
        yield
        return
    group_cls = getattr(cpp, "KernelGroup", None)
    sched_cls = getattr(cpp, "CppScheduling", None)
    if (
        group_cls is None or sched_cls is None
        or "finalize_kernel" not in vars(group_cls) or "codegen_comment" not in vars(sched_cls)
        or not hasattr(debug, "_inductor_triton_kernel_to_post_grad_node_info")
    ):
        yield
        return
    orig_finalize = vars(group_cls)["finalize_kernel"]
    orig_comment = vars(sched_cls)["codegen_comment"]

    def finalize_kernel(self: Any, new_kernel: Any, nodes: Any) -> Any:
        loops = self.__dict__.setdefault("_fusecheck_loops", [])
        names: list[str] = []
        for n in nodes:
            for origin in getattr(getattr(n, "node", None), "origins", ()):
                if origin.name not in names:
                    names.append(origin.name)
        loops.append(names)
        return orig_finalize(self, new_kernel, nodes)

    def codegen_comment(self: Any, node_schedule: Any, kernel_name: Any = None) -> Any:
        out = orig_comment(self, node_schedule, kernel_name)
        loops = getattr(self.kernel_group, "_fusecheck_loops", [])
        table = debug._inductor_triton_kernel_to_post_grad_node_info
        handle = getattr(debug, "_inductor_kernel_provenance_debug_handle", 0)
        if kernel_name and len(loops) > 1:
            for i, names in enumerate(loops):
                table[f"{kernel_name}{LOOP_MARK}{i}:{handle}"] = list(names)
        return out

    with mock.patch.object(group_cls, "finalize_kernel", finalize_kernel), \
            mock.patch.object(sched_cls, "codegen_comment", codegen_comment):
        yield


@contextlib.contextmanager
def _backward_provenance() -> Iterator[None]:
    """Let Inductor dump kernel provenance for graphs compiled without a pre-grad graph id.

    ``dump_inductor_provenance_info`` only maps kernels when ``_pre_grad_graph_id`` is set, which is
    true for the forward compile only: the backward, compiled lazily at the first ``.backward()``,
    would otherwise be stored without its kernel map - or, since nothing resets the provenance tables
    around it, with the previous backward's kernels as well; so they are cleared before its codegen.
    """
    try:
        from torch._inductor import debug
        from torch._inductor.scheduler import Scheduler
    except ImportError:  # pragma: no cover
        yield
        return
    orig = getattr(debug, "dump_inductor_provenance_info", None)
    orig_codegen = vars(Scheduler).get("codegen")
    tables = ("_inductor_triton_kernel_to_post_grad_node_info", "_inductor_kernel_stack_trace")
    if orig is None or orig_codegen is None or not all(
        hasattr(debug, a) for a in ("_pre_grad_graph_id", *tables)
    ):
        yield
        return

    def codegen(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not debug._pre_grad_graph_id:
            for table in tables:
                setattr(debug, table, {})
        return orig_codegen(self, *args, **kwargs)

    def dump_inductor_provenance_info(*args: Any, **kwargs: Any) -> Any:
        if debug._pre_grad_graph_id:
            return orig(*args, **kwargs)
        debug._pre_grad_graph_id = -1
        try:
            return orig(*args, **kwargs)
        finally:
            debug._pre_grad_graph_id = None

    with mock.patch.object(debug, "dump_inductor_provenance_info", dump_inductor_provenance_info), \
            mock.patch.object(Scheduler, "codegen", codegen):
        yield


@contextlib.contextmanager
def collecting_census() -> Iterator[KernelCensus]:
    """Collect the census of every Inductor graph compiled (or loaded from cache) inside. Nestable.

    Never fails a compile: on a torch without provenance tracking the census stays empty and says why
    in ``unavailable`` (the check itself still runs).
    """
    what = "kernel census"
    census = KernelCensus()
    try:
        cls = require_own("torch._inductor.output_code", "CompiledFxGraph", "post_compile", what)
        patch = require_config({"trace.provenance_tracking_level": 1}, what)
    except ToggleUnsupported as exc:
        census.unavailable = str(exc)
        yield census
        return
    from torch._inductor import config

    outermost = not _ACTIVE
    with contextlib.ExitStack() as stack:
        stack.enter_context(salted(("census-v4",)))
        stack.enter_context(config.patch(patch))
        if outermost:
            stack.enter_context(_post_compile_hook(cls))
            stack.enter_context(_cpp_loop_hooks())
            stack.enter_context(_backward_provenance())
        _ACTIVE.append(census)
        stack.callback(_ACTIVE.remove, census)
        yield census
