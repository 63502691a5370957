"""The kernel census comes from Inductor's own provenance, survives cache hits, and is a networkx graph."""
from __future__ import annotations

import json

import networkx as nx
import torch

from fusecheck.toggles.census import KernelCensus, collecting_census


def mlp(x, w):
    return torch.relu(x @ w).sum(-1)


def test_census_maps_fx_nodes_to_kernels_as_a_bipartite_graph():
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    with collecting_census() as c:
        torch.compile(mlp)(x, w)
    assert isinstance(c.graph, nx.DiGraph) and c.n_graphs == 1 and c.missing == 0
    kinds = nx.get_node_attributes(c.graph, "kind")
    assert set(kinds.values()) == {"fx", "kernel"}
    assert all(kinds[u] == "fx" and kinds[v] == "kernel" for u, v in c.graph.edges)
    names = {c.graph.nodes[k]["name"] for k in c.kernels}
    assert "extern_kernels.mm" in names and c.n_extern == 1  # the matmul is a library call
    fx = {c.graph.nodes[n]["name"] for n, d in c.graph.nodes(data=True) if d["kind"] == "fx"}
    assert {"mm", "relu", "sum_1"} <= fx
    pre = {p for n, d in c.graph.nodes(data=True) if d["kind"] == "fx" for p in d["pre_grad"]}
    assert pre, "post-grad nodes carry their pre-grad origins"


def test_census_is_the_same_on_a_cache_hit_and_round_trips_through_json():
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    with collecting_census() as cold:
        torch.compile(mlp)(x, w)
    with collecting_census() as warm:  # Dynamo was reset on leaving: this is an FX-graph-cache hit
        torch.compile(mlp)(x, w)
    assert warm.signature() == cold.signature()
    d = json.loads(json.dumps(warm.to_dict()))
    assert d["n_kernels"] == warm.n_kernels and d["n_fx_nodes_fused"] == warm.n_fx_nodes_fused
    assert KernelCensus.from_dict(d).signature() == warm.signature()


def test_cpu_loop_nests_count_as_kernels_within_one_function():
    # sum then +1: on CPU both loop nests land in one C++ function; fusion decided two kernels.
    with collecting_census() as c:
        torch.compile(lambda x: (x * 2).sum(-1) + 1)(torch.randn(8, 32))
    assert c.n_kernels == 2 and c.n_functions == 1
    assert c.n_fx_nodes_fused == 2 and c.n_fused_kernels == 1


def test_nested_censuses_both_see_the_compile_and_nothing_leaks_after():
    with collecting_census() as outer:
        with collecting_census() as inner:
            torch.compile(lambda x: x.sin() + 1)(torch.randn(4, 4))
    assert outer.signature() == inner.signature() and inner.n_kernels == 1
    with collecting_census() as later:
        pass
    torch.compile(lambda x: x.cos())(torch.randn(4, 4))
    assert later.n_graphs == 0


def test_summary_names_the_counts():
    with collecting_census() as c:
        torch.compile(lambda x: (x * 3).exp())(torch.randn(4, 4))
    assert c.summary() == "1 kernels (1 generated, 0 extern); 2 FX nodes fused into 1 kernels"


def test_a_torch_without_provenance_gives_an_empty_census_that_says_why(monkeypatch):
    from torch._inductor.output_code import CompiledFxGraph

    monkeypatch.delattr(CompiledFxGraph, "post_compile")
    with collecting_census() as c:
        pass
    assert c.n_kernels == 0 and "CompiledFxGraph.post_compile" in c.unavailable
    assert c.to_dict()["unavailable"] == c.unavailable
