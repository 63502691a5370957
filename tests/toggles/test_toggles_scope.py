"""Scoping, nesting, restoring, error messages and the cache guarantee of ``toggled``."""
from __future__ import annotations

import re

import pytest
import torch

from fusecheck.toggles import ToggleError, ToggleUnsupported, active, toggled
from fusecheck.toggles.census import collecting_census
from fusecheck.toggles.hooks import fusion_veto, inline_veto


def chain(x):
    return ((x * 2 + 1).sin() * 3 - x).cos()


def _state():
    from torch._inductor import config
    from torch._inductor import decomposition, lowering
    from torch._inductor.graph import GraphLowering
    from torch._inductor.scheduler import Scheduler
    from torch._inductor.virtualized import V

    return {
        "config": {k: getattr(config, k) for k in (
            "post_grad_custom_pre_pass", "custom_partitioner_fn", "pattern_matcher", "emulate_precision_casts",
            "split_reductions", "layout_optimization", "fallback_random", "max_autotune", "epilogue_fusion", "unroll_reductions_threshold",
            "combo_kernels", "max_autotune_gemm", "max_autotune_gemm_backends", "max_autotune_conv_backends",
            "deterministic", "batch_invariant", "emulate_precision_casts_on_saved_tensors")}
        | {"provenance": config.trace.provenance_tracking_level}
        | {f"eager_numerics.{k}": getattr(config.eager_numerics, k) for k in (
            "division_rounding", "disable_ftz", "use_pytorch_libdevice")},
        "matmul_lowerings": {op: lowering.lowerings.get(op) for op in (
            torch.ops.aten.mm.default, torch.ops.aten.bmm.default, torch.ops.aten.addmm.default)},
        "run_node": GraphLowering.__dict__["run_node"],
        "foreach": Scheduler.__dict__["create_foreach_nodes"],
        "choices": type(V.choices),
        "decomps": (decomposition.decompositions, decomposition.fast_random_decomps),
        "lowering_decomps": lowering.decompositions,
    }


def test_unknown_toggle_lists_the_known_names():
    with pytest.raises(ToggleError, match="unknown toggle 'fusion.everything'.*fusion.pointwise.*split_reductions"):
        with toggled(["fusion.everything"]):
            pass


def test_every_toggle_and_all_together_restore_everything_they_touched():
    from fusecheck.toggles import TOGGLES

    supported = [name for name in TOGGLES if _supported(name)]
    assert "numerics.strict" not in supported or torch.__version__ >= "2.14"  # no upstream strict key in 2.13
    before = _state()
    for name in supported:
        with toggled([name]):
            assert name in active()
        assert _state() == before, name
    with toggled(supported):
        assert _state() != before
    assert _state() == before and active() == ()


def _supported(name):
    from fusecheck.toggles import TOGGLES

    try:
        TOGGLES[name].check()
    except ToggleUnsupported:
        return False
    return True


@pytest.mark.parametrize("ci_env", ["", "1"], ids=["local", "CI-set"])
def test_compiling_without_decompositions_leaves_no_fallback_lowerings_behind(ci_env, monkeypatch):
    """Ops that are not decomposed get implicit fallbacks while lowering; the scope must remove them.

    With ``CI`` set (every CI runner), Inductor refuses fallbacks for ops that have a decomposition
    unless told the fallback is deliberate: the toggle must work there too.
    """
    from torch._inductor import lowering

    monkeypatch.setenv("CI", ci_env)

    ops = [torch.ops.aten.hardswish.default, torch.ops.aten.logaddexp.default, torch.ops.aten.deg2rad.default]
    leaked_earlier = {op: lowering.lowerings.pop(op) for op in ops if op in lowering.lowerings}  # hermetic
    try:
        before = set(lowering.lowerings)
        realized_before = set(lowering.needs_realized_inputs)
        torch._dynamo.reset()
        from torch._inductor import config

        with toggled(["decompositions"]), config.patch(force_disable_caches=True):  # a cache hit lowers nothing
            fn = torch.compile(lambda x: torch.nn.functional.hardswish(x) + torch.logaddexp(x, 2 * x) + torch.deg2rad(x))
            fn(torch.randn(4, 8))
            added = set(lowering.lowerings) - before
        assert set(ops) & added, "without decompositions these ops must reach lowering as aten fallbacks"
        assert set(lowering.lowerings) == before
        assert set(lowering.needs_realized_inputs) == realized_before  # make_fallback writes there too
    finally:
        lowering.lowerings.update(leaked_earlier)


def test_nesting_adds_toggles_and_unwinds_in_order():
    from torch._inductor import config

    with toggled(["split_reductions"]):
        outer = config.post_grad_custom_pre_pass
        with toggled(["emulate_precision_casts", "split_reductions"]):
            assert active() == ("split_reductions", "emulate_precision_casts")
            assert config.emulate_precision_casts and not config.split_reductions
            assert config.post_grad_custom_pre_pass.uuid() != outer.uuid()
        assert active() == ("split_reductions",) and not config.emulate_precision_casts
        assert config.post_grad_custom_pre_pass is outer
    assert active() == ()


def test_a_toggle_fails_before_touching_anything():
    before = _state()
    with pytest.raises(ToggleError):
        with toggled(["split_reductions", "nope"]):
            pass
    assert _state() == before


@pytest.mark.parametrize("name, target, attr", [
    ("fusion.pointwise", "torch._inductor.virtualized._V", "set_choices_handler"),
    ("decompositions", "torch._inductor.decomposition", "fast_random_decomps"),
    ("fusion.horizontal", "torch._inductor.scheduler.Scheduler", "create_foreach_nodes"),
    ("partitioner.no_recompute", "torch._inductor.custom_graph_pass", "CustomPartitionerFn"),
])
def test_missing_inductor_attribute_is_a_clear_unsupported_error(monkeypatch, name, target, attr):
    import importlib

    module_path, _, cls_name = target.rpartition(".")
    try:
        obj = importlib.import_module(target)
    except ImportError:
        obj = getattr(importlib.import_module(module_path), cls_name)
    monkeypatch.delattr(obj, attr)
    with pytest.raises(ToggleUnsupported, match=rf"{re.escape(name)}.*torch {re.escape(torch.__version__)}.*{attr}"):
        with toggled([name]):
            pass


def test_missing_config_key_is_unsupported(monkeypatch):
    from torch._inductor import config

    monkeypatch.setattr(type(config), "__getattr__", _hide("emulate_precision_casts", type(config).__getattr__))
    with pytest.raises(ToggleUnsupported, match="torch._inductor.config.emulate_precision_casts"):
        with toggled(["emulate_precision_casts"]):
            pass


def _hide(key, orig):
    def getattr_(self, name):
        if name == key:
            raise AttributeError(name)
        return orig(self, name)

    return getattr_


def test_a_compiled_module_is_not_reused_across_toggle_sets():
    x = torch.randn(8, 32)
    cf = torch.compile(chain)
    with collecting_census() as first:
        cf(x)
    with toggled(["fusion.pointwise"]), collecting_census() as toggled_census:
        cf(x)  # same compiled object: must recompile under the toggle, not reuse the fused kernel
    with collecting_census() as again:
        cf(x)
    assert first.n_kernels == 1 and toggled_census.n_kernels == 6 and again.n_kernels == 1


def test_salt_wraps_and_still_runs_a_users_custom_pass():
    from torch._inductor import config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    calls = []

    class Counting(CustomGraphPass):
        def __call__(self, graph):
            calls.append(len(graph.nodes))

        def uuid(self):
            return "counting-v1"

    user_pass = Counting()
    with config.patch(post_grad_custom_pre_pass=user_pass, fx_graph_cache=False):
        with toggled(["fusion.pointwise"]):
            assert config.post_grad_custom_pre_pass.inner is user_pass
            torch.compile(chain)(torch.randn(4, 8))
        assert config.post_grad_custom_pre_pass is user_pass
    assert calls, "the user's pass did not run under the salt"


def test_hooks_report_kinds_and_graph_order():
    seen_fusions, seen_nodes = [], []

    def veto_all(n1, n2, kind):
        seen_fusions.append(kind)
        return True

    def realize_all(node, value):
        seen_nodes.append(node.name)
        return True

    from torch._inductor import config

    with config.patch(force_disable_caches=True), inline_veto(realize_all), fusion_veto(veto_all), \
            collecting_census() as c:
        torch.compile(lambda x: (x.sin() + 1, x.cos()))(torch.randn(4, 8))
    assert set(seen_fusions) == {"vertical", "horizontal"}
    assert seen_nodes == ["sin", "add", "cos"]
    assert c.n_fused_kernels == 0 and c.n_kernels == 3


def test_allow_first_k_fusions_is_deterministic_and_monotonic():
    from fusecheck.toggles.hooks import AllowFirst
    from torch._inductor import config

    kernels, decisions = {}, {}
    for k in (0, 2, 100, 2):
        gate = AllowFirst(k)
        with config.patch(fx_graph_cache=False), inline_veto(lambda n, v: True), fusion_veto(gate), \
                collecting_census() as c:
            torch.compile(chain)(torch.randn(8, 32))
        assert sum(ok for _, ok in gate.decisions) == min(k, len(gate.decisions))
        if k in kernels:  # asked again: same decisions in the same order, same kernels
            assert (kernels[k], decisions[k]) == (c.n_kernels, gate.decisions)
        kernels[k], decisions[k] = c.n_kernels, gate.decisions
    assert kernels[0] == 6 > kernels[2] > kernels[100] == 1


def test_allow_first_k_inlinings_realizes_the_rest():
    from fusecheck.toggles.hooks import AllowFirst, ir_kind
    from torch._inductor import config

    kernels = {}
    for k in (0, 3, 100):
        gate = AllowFirst(k, inline=True, eligible=lambda n, v, _: ir_kind(v) == "pointwise")
        with config.patch(fx_graph_cache=False), inline_veto(gate), fusion_veto(lambda *a: True), \
                collecting_census() as c:
            torch.compile(chain)(torch.randn(8, 32))
        assert [key for key, _ in gate.decisions] == [("mul",), ("add",), ("sin",), ("mul_1",), ("sub",)]
        kernels[k] = c.n_kernels
    assert kernels[0] == 6 > kernels[3] > kernels[100] == 1
