"""Each toggle proven on a tiny model where it applies: the kernel census moves the expected way, and
the census after leaving the toggle equals the census before entering it."""
from __future__ import annotations

import functools

import re

import pytest
import torch
import torch.nn.functional as F

from fusecheck.toggles import TOGGLES, applicability, toggled
from fusecheck.toggles.census import collecting_census


# -- tiny models (8x32 fp32 unless said otherwise) --------------------------------------------------
def chain(x):
    return ((x * 2 + 1).sin() * 3 - x).cos()


def reduce_chain(x):
    return (x * 2).sum(-1) + 1


def two_reductions(x):
    return x.sum(-1), x.amax(-1)


def gelu_softmax(x):
    return F.gelu(x).softmax(-1)


def mm_add(a, b, c):
    return torch.mm(a, b) + c


def rand_add(x):
    return torch.rand_like(x) + x


def sin_sin_cos(x):
    return x.sin().sin().cos()


def bf16_chain(x):
    return ((x * 1.7 + 0.3).sin() * x - 0.1).exp()


def _inputs(name):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 32, generator=g)
    if name == "mm_add":
        return (torch.randn(16, 16, generator=g), torch.randn(16, 16, generator=g), torch.randn(16, generator=g))
    if name == "sin_sin_cos":
        return (x.requires_grad_(),)
    if name == "bf16_chain":
        return (torch.randn(64, 64, generator=g).to(torch.bfloat16),)
    return (x,)


MODELS = {f.__name__: f for f in (chain, reduce_chain, two_reductions, gelu_softmax, mm_add, rand_add,
                                  sin_sin_cos, bf16_chain)}


@functools.lru_cache(maxsize=None)
def compiled(model: str, names: tuple[str, ...] = (), phase: str = "before"):
    """(census, outputs) of one compile of MODELS[model] under ``names``; shared by every test."""
    fn, args = MODELS[model], _inputs(model)
    with toggled(list(names)), collecting_census() as census:
        out = torch.compile(fn)(*args)
        if model == "sin_sin_cos":
            out.sum().backward()
    return census, out


def around(model: str, names: tuple[str, ...]):
    """Census before entering the toggles, under them, and after leaving them."""
    before, _ = compiled(model, (), "before")
    inside, _ = compiled(model, names)
    after, _ = compiled(model, (), "after")
    assert after.n_graphs >= 1 and after.missing == 0
    assert after.signature() == before.signature(), "leaving the toggle did not restore the census"
    return before, inside


def kernel_nodes(census):
    return [set(census.fx_nodes_of(k)) for k in census.kernels]


# -- one test per toggle ----------------------------------------------------------------------------
def test_fusion_pointwise_splits_a_fused_chain_into_one_kernel_per_op():
    before, inside = around("chain", ("fusion.pointwise",))
    assert before.n_kernels == 1 and before.n_fx_nodes_fused == 6
    assert inside.n_kernels == 6 and inside.n_fused_kernels == 0
    assert all(len(nodes) == 1 for nodes in kernel_nodes(inside))


def test_fusion_pointwise_leaves_reduction_fusion_alone():
    before, inside = around("reduce_chain", ("fusion.pointwise",))
    fused_into_sum = [n for n in kernel_nodes(inside) if any(x.startswith("sum") for x in n) and len(n) > 1]
    assert fused_into_sum, "the pointwise producer of a reduction belongs to fusion.reduction"


def test_fusion_reduction_keeps_producers_and_epilogues_out_of_reductions():
    before, inside = around("reduce_chain", ("fusion.reduction",))
    assert any(len(n) > 1 and any(x.startswith("sum") for x in n) for n in kernel_nodes(before))
    assert inside.n_kernels > before.n_kernels
    assert all(len(n) == 1 for n in kernel_nodes(inside) if any(x.startswith("sum") for x in n))


def test_fusion_horizontal_separates_two_reductions_of_one_input():
    before, inside = around("two_reductions", ("fusion.horizontal",))
    assert before.n_kernels == 1 and before.n_fx_nodes_fused == 2
    assert inside.n_kernels == 2 and inside.n_fused_kernels == 0


def test_decompositions_off_falls_back_to_aten_kernels():
    before, inside = around("gelu_softmax", ("decompositions",))
    assert before.n_extern == 0 and before.n_fx_nodes_fused > 2
    assert inside.n_generated < before.n_generated and inside.n_extern >= 2
    names = " ".join(inside.graph.nodes[k]["name"] for k in inside.kernels)
    assert "gelu" in names and "softmax" in names


def test_pattern_passes_off_keeps_mm_and_add_apart():
    before, inside = around("mm_add", ("pattern_passes",))
    fx = lambda c: {n for nodes in kernel_nodes(c) for n in nodes}  # noqa: E731
    assert any(n.startswith("addmm") for n in fx(before)), "the mm+add -> addmm pattern should fire by default"
    assert not any(n.startswith("addmm") for n in fx(inside))
    assert inside.n_kernels > before.n_kernels


def test_no_recompute_partitioner_stops_recomputing_in_backward():
    before, inside = around("sin_sin_cos", ("partitioner.no_recompute",))
    assert before.n_graphs == 2 and inside.n_graphs == 2  # forward and backward

    def backward_fx(c):
        return {c.graph.nodes[n]["name"] for n, d in c.graph.nodes(data=True) if d["kind"] == "fx" and d["graph"] == 1}

    recomputed = {"sin", "sin_1"}
    assert recomputed <= backward_fx(before), "min-cut recomputes the cheap sins in backward"
    assert not recomputed & backward_fx(inside)


@pytest.mark.skipif(tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 13),
                    reason="torch 2.11's C++ codegen ignores emulate_precision_casts (measured on the H200 host's "
                           "CPU: 1278 differing elements with and without); Triton's honours it")
def test_emulate_precision_casts_shrinks_the_bitwise_difference_to_eager():
    (x,) = _inputs("bf16_chain")
    eager = bf16_chain(x)
    before, inside = around("bf16_chain", ("emulate_precision_casts",))
    diff_default = (compiled("bf16_chain")[1] != eager).sum().item()
    diff_emulated = (compiled("bf16_chain", ("emulate_precision_casts",))[1] != eager).sum().item()
    assert diff_emulated < diff_default
    assert inside.signature() == before.signature()  # same kernels; only the rounding inside changes


def test_fallback_random_uses_the_aten_rng():
    before, inside = around("rand_add", ("fallback_random",))
    names = lambda c: [c.graph.nodes[k]["name"] for k in c.kernels]  # noqa: E731
    # torch 2.13 falls back to aten.rand_like, 2.11 to aten.rand (Inductor's own seeds are aten.randint)
    aten_rng = re.compile(r"\baten\.rand(_like)?(\.|$)")
    assert not any(aten_rng.search(n) for n in names(before)), names(before)
    assert any(aten_rng.search(n) for n in names(inside)), names(inside)


def test_split_reductions_config_is_scoped():
    # On CPU Inductor never splits reductions, so the census cannot move here: see the GPU test.
    from torch._inductor import config

    default = config.split_reductions
    with toggled(["split_reductions"]):
        assert config.split_reductions is False
    assert config.split_reductions == default


def test_layout_optimization_config_is_scoped_and_keeps_eager_s_layout():
    """Off, Inductor allocates no channels-last buffer for a convolution chain; its default converts them (as it did
    in the MobileViT draws whose gradients this toggle made pass: docs/benchmarks.md)."""
    import re

    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    conv = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3))
    x = torch.randn(2, 8, 12, 12)

    def channels_last_buffers() -> list[str]:  # 4-d buffers whose channel stride is 1
        torch._dynamo.reset()
        _, code = run_and_get_code(torch.compile(conv, backend="inductor"), x)
        torch._dynamo.reset()
        return re.findall(r"empty_strided_\w+\(\(\d+, \d+, \d+, \d+\), \(\d+, 1, \d+, \d+\)", "\n".join(code))

    default = config.layout_optimization
    assert channels_last_buffers()
    with toggled(["layout_optimization"]):
        assert config.layout_optimization is False
        assert channels_last_buffers() == []
    assert config.layout_optimization == default


def test_fusion_template_turns_autotune_on_and_template_fusion_off():
    from torch._inductor import config

    saved = (config.max_autotune, config.epilogue_fusion, config.prologue_fusion)
    with toggled(["fusion.template"]) as _:
        assert config.max_autotune is True and config.epilogue_fusion is False and config.prologue_fusion is False
    assert (config.max_autotune, config.epilogue_fusion, config.prologue_fusion) == saved
    assert TOGGLES["fusion.template"].reference == ("max_autotune",)


class _FakeNode:
    def __init__(self, name, template=False, reduction=False):
        self.name, self.template, self.reduction = name, template, reduction
        self.ancestors = set()

    def is_template(self):
        return self.template

    def is_reduction(self):
        return self.reduction

    def is_foreach(self):
        return False

    def get_operation_names(self):
        return {self.name}

    def get_name(self):
        return self.name


def test_fusion_template_vetoes_template_pairs_in_the_installed_choices(monkeypatch):
    from types import SimpleNamespace

    from torch._inductor.virtualized import V

    mm, relu, add = _FakeNode("op0", template=True), _FakeNode("op1"), _FakeNode("op2")
    relu.ancestors = {"op0"}
    with toggled(["fusion.template"]):
        choices = V.choices
        monkeypatch.setattr(choices, "_inner", SimpleNamespace(can_fuse=lambda *a: True))  # Inductor says yes
        assert choices.can_fuse(None, mm, relu, 1) is False  # epilogue
        assert choices.can_fuse(None, relu, mm, 1) is False  # prologue
        assert choices.can_fuse(None, relu, add, 1) is True  # other pairs left to Inductor
    assert not hasattr(V.choices, "_veto")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (Triton templates)")
def test_fusion_template_on_gpu_unfuses_the_epilogue():
    a = torch.randn(256, 256, device="cuda", dtype=torch.float16)

    def mm_relu(x, w):
        return torch.relu(x @ w) * 2

    results = {}
    for names in (("max_autotune",), ("fusion.template",)):
        with toggled(list(names)), collecting_census() as c:
            torch.compile(mm_relu)(a, a)
        results[names] = c
    ref, off = results[("max_autotune",)], results[("fusion.template",)]
    assert off.n_kernels > ref.n_kernels or off.n_extern > ref.n_extern


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (reductions split on GPU only)")
def test_split_reductions_on_gpu_gives_one_reduction_kernel():
    x = torch.randn(1 << 22, device="cuda")
    results = {}
    for names in ((), ("split_reductions",)):
        with toggled(list(names)), collecting_census() as c:
            torch.compile(lambda t: t.sum())(x)
        results[names] = c
    assert results[("split_reductions",)].n_kernels < results[()].n_kernels


# -- applicability ----------------------------------------------------------------------------------
def _aten_graph(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(*args)


def _dynamo_graph(fn, *args):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(*args)
    torch._dynamo.reset()
    return graphs[0]


@pytest.mark.parametrize("capture", [_aten_graph, _dynamo_graph])
def test_applicability_says_why_a_toggle_cannot_change_the_graph(capture):
    x = torch.randn(4, 8)
    pointwise_only = capture(chain, x)
    with_reduction = capture(reduce_chain, x)
    r = applicability(None, [pointwise_only])
    assert r["fusion.pointwise"] is None
    assert r["fusion.reduction"] == "not applicable: no reduction in the graph"
    assert r["emulate_precision_casts"] == "not applicable: no fp16/bf16 tensors in the graph"
    assert r["fusion.template"].startswith("not applicable")
    assert r["fallback_random"].startswith("not applicable")
    assert applicability(["fusion.reduction"], [pointwise_only, with_reduction]) == {"fusion.reduction": None}
    assert applicability(["partitioner.no_recompute"], [pointwise_only], train=False)[
        "partitioner.no_recompute"].startswith("not applicable")
    assert applicability(["emulate_precision_casts"], [capture(chain, x.bfloat16())]) == {
        "emulate_precision_casts": None}
    assert r["layout_optimization"] == "not applicable: no convolution in the graph"
    conv = torch.nn.Conv2d(2, 3, 3)
    assert applicability(["layout_optimization"], [capture(conv, torch.randn(1, 2, 6, 6))]) == {
        "layout_optimization": None}
