"""The toggle entries. Names are backend-neutral: the Ascend adapter maps them onto autofuse flags.

Each entry says what it does (doc), how it is applied (how), when it applies to a graph, and applies
itself onto an ExitStack. Every lookup of an Inductor internal goes through ``compat`` so that an
unsupported torch raises ToggleUnsupported instead of silently doing nothing.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from . import graph_kinds as gk
from .appliers import always, config_patch, low_precision, needs, training
from .compat import require_attr, require_config, require_module, require_own
from .fallbacks import decomposition_table
from .hooks import fusion_veto, inline_veto, ir_kind, node_traits
from .toggle import Toggle


_config, _needs, _always = config_patch, needs, always


def _has_users_of(node: torch.fx.Node, tag: Any) -> bool:
    return any(isinstance(u.target, torch._ops.OpOverload) and tag in u.target.tags for u in node.users)


# -- fusion.pointwise --------------------------------------------------------------------------------
def _pointwise_pair(n1: Any, n2: Any, kind: str) -> bool:
    return node_traits(n1) == {"pointwise"} and node_traits(n2) == {"pointwise"}


def _realize_pointwise(node: torch.fx.Node, value: Any) -> bool:
    # Pointwise values feeding only reductions stay inlined: that is fusion.reduction's business.
    only_reductions = node.users and all(
        isinstance(u.target, torch._ops.OpOverload) and torch.Tag.reduction in u.target.tags
        for u in node.users
    )
    return ir_kind(value) == "pointwise" and not only_reductions


def _apply_pointwise(stack: contextlib.ExitStack) -> None:
    name = "fusion.pointwise"
    cms = [inline_veto(_realize_pointwise, toggle=name), fusion_veto(_pointwise_pair, toggle=name)]
    for cm in cms:
        stack.enter_context(cm)


# -- fusion.reduction --------------------------------------------------------------------------------
def _reduction_pair(n1: Any, n2: Any, kind: str) -> bool:
    return "reduction" in node_traits(n1) or "reduction" in node_traits(n2)


def _realize_reduction_inputs(node: torch.fx.Node, value: Any) -> bool:
    return ir_kind(value) == "pointwise" and _has_users_of(node, torch.Tag.reduction)


def _apply_reduction(stack: contextlib.ExitStack) -> None:
    name = "fusion.reduction"
    # Small reductions are otherwise unrolled into pointwise code and fused like pointwise ops.
    patch = require_config({"unroll_reductions_threshold": 1}, name)
    cms = [
        inline_veto(_realize_reduction_inputs, toggle=name),
        fusion_veto(_reduction_pair, toggle=name),
    ]
    from torch._inductor import config

    stack.enter_context(config.patch(patch))
    for cm in cms:
        stack.enter_context(cm)


# -- fusion.template ---------------------------------------------------------------------------------
def _template_pair(n1: Any, n2: Any, kind: str) -> bool:
    return "template" in node_traits(n1) or "template" in node_traits(n2)


def _apply_template(stack: contextlib.ExitStack) -> None:
    name = "fusion.template"
    from torch._inductor import config

    patch = require_config({"epilogue_fusion": False}, name)
    if hasattr(config, "prologue_fusion"):
        patch["prologue_fusion"] = False
    cm = fusion_veto(_template_pair, toggle=name)
    stack.enter_context(config.patch(patch))
    stack.enter_context(cm)


# -- fusion.horizontal -------------------------------------------------------------------------------
def _horizontal_pair(n1: Any, n2: Any, kind: str) -> bool:
    return kind == "horizontal"


@contextlib.contextmanager
def _no_foreach_grouping(scheduler_cls: type) -> Any:
    orig = scheduler_cls.__dict__["create_foreach_nodes"]
    scheduler_cls.create_foreach_nodes = lambda self: None
    try:
        yield
    finally:
        scheduler_cls.create_foreach_nodes = orig


def _apply_horizontal(stack: contextlib.ExitStack) -> None:
    name = "fusion.horizontal"
    from torch._inductor import config

    sched = require_own("torch._inductor.scheduler", "Scheduler", "create_foreach_nodes", name)
    patch = require_config({"combo_kernels": False}, name)
    cm = fusion_veto(_horizontal_pair, toggle=name)
    stack.enter_context(config.patch(patch))
    stack.enter_context(_no_foreach_grouping(sched))
    stack.enter_context(cm)


# -- decompositions ----------------------------------------------------------------------------------
def _minimal_decomps() -> dict[Any, Any]:
    """Only what Inductor cannot lower otherwise: decompositions of ops with no aten kernel to fall back to."""
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.lowering import lowerings

    keep = {}
    for op, fn in select_decomp_table().items():
        if op in lowerings:
            continue  # Inductor has its own lowering
        if not isinstance(op, torch._ops.OpOverload):
            keep[op] = fn
            continue
        if not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CPU") and not (
            torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeExplicitAutograd")
        ):
            keep[op] = fn  # no eager kernel: must decompose to lower at all
    return keep


def _apply_decompositions(stack: contextlib.ExitStack) -> None:
    name = "decompositions"
    module = require_module("torch._inductor.decomposition", name)
    for attr in ("select_decomp_table", "decompositions", "fast_random_decomps"):
        require_attr("torch._inductor.decomposition", attr, name)
    require_attr("torch._inductor.lowering", "lowerings", name)
    require_attr("torch._inductor.graph", "make_fallback", name)
    stack.enter_context(decomposition_table(module, _minimal_decomps()))


def _decomposable(gm: torch.fx.GraphModule) -> bool | str:
    from torch._inductor.decomposition import select_decomp_table

    table = select_decomp_table()
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            if node.target in table:
                return True
        elif node.op in ("call_function", "call_method", "call_module"):
            if gk.node_kinds(node, gm) - {"view"}:
                return True  # torch-level op: aten decomposition happens below Dynamo
    return "not applicable: no op that Inductor decomposes"


# -- partitioner.no_recompute ------------------------------------------------------------------------
def _no_recompute_partitioner(name: str) -> Any:
    base = require_attr("torch._inductor.custom_graph_pass", "CustomPartitionerFn", name)
    require_attr("torch._functorch.partitioners", "default_partition", name)
    global NoRecompute
    if NoRecompute is None:

        class _NoRecompute(base):  # type: ignore[misc, valid-type]
            """AOTAutograd's default partitioner: saves what the forward computed, recomputes nothing."""

            def __call__(self, gm: Any, joint_inputs: Any, **kwargs: Any) -> Any:
                from torch._functorch.partitioners import default_partition

                kwargs.pop("compiler", None)
                return default_partition(gm, joint_inputs, **kwargs)

            def uuid(self) -> str:
                return "fusecheck.partitioner.no_recompute.v1"

        _NoRecompute.__name__ = _NoRecompute.__qualname__ = "NoRecompute"
        NoRecompute = _NoRecompute  # module-level name: the cache key pickles the config
    return NoRecompute()


NoRecompute: Any = None


def _apply_no_recompute(stack: contextlib.ExitStack) -> None:
    name = "partitioner.no_recompute"
    patch = require_config({"custom_partitioner_fn": None}, name)
    patch["custom_partitioner_fn"] = _no_recompute_partitioner(name)
    from torch._inductor import config

    stack.enter_context(config.patch(patch))


_training, _low_precision = training, low_precision


def _split_candidates(gm: torch.fx.GraphModule) -> bool | str:
    return gk.graph_kind_counts(gm)["reduction"] >= 1 or "not applicable: no reduction in the graph"


def _horizontal_candidates(gm: torch.fx.GraphModule) -> bool | str:
    if gk.graph_kind_counts(gm)["foreach"] or gk.has_shared_reads(gm):
        return True
    return "not applicable: no value read by two ops and no foreach op"


_ENTRIES = [
    Toggle(
        "fusion.pointwise",
        "no pointwise-with-pointwise fusion, including the merging of pointwise chains at lowering time",
        "realize every pointwise value at lowering (GraphLowering.run_node) + veto pointwise pairs in "
        "InductorChoices.can_fuse",
        _apply_pointwise,
        _needs("pointwise", "not applicable: fewer than two pointwise ops in the graph", 2),
    ),
    Toggle(
        "fusion.reduction",
        "no fusion into or out of reductions (producers not inlined, no epilogues, no reduction pairs)",
        "realize pointwise inputs of reductions at lowering + veto any scheduler fusion with a reduction "
        "+ unroll_reductions_threshold=1",
        _apply_reduction,
        _needs("reduction", "not applicable: no reduction in the graph"),
    ),
    Toggle(
        "fusion.template",
        "turns max-autotune templates ON and forbids only their epilogue/prologue fusion (compare with the "
        "max_autotune row); for no templates at all use templates.off",
        "max_autotune + epilogue_fusion=False, prologue_fusion=False + veto template pairs; reference row "
        "is max_autotune",
        _apply_template,
        _needs("matmul", "not applicable: no matmul or convolution in the graph"),
        reference=("max_autotune",),
        implies=("max_autotune",),
    ),
    Toggle(
        "fusion.horizontal",
        "no horizontal (consumer/consumer) fusion, no foreach grouping, no combo kernels",
        "veto horizontal pairs in InductorChoices.can_fuse + Scheduler.create_foreach_nodes off + "
        "combo_kernels=False",
        _apply_horizontal,
        _horizontal_candidates,
    ),
    Toggle(
        "decompositions",
        "compile without Inductor's decomposition table (only decompositions needed to lower at all)",
        "select_decomp_table() returns only ops with no lowering and no eager kernel; the rest fall back to aten",
        _apply_decompositions,
        _decomposable,
    ),
    Toggle(
        "pattern_passes",
        "pre-grad, joint-graph and post-grad pattern-matcher passes off (incl. attention rewrites)",
        "pattern_matcher=False",
        _config("pattern_passes", pattern_matcher=False),
        _always,
    ),
    Toggle(
        "partitioner.no_recompute",
        "training graphs partitioned without recomputation (forward saves what backward needs)",
        "custom_partitioner_fn = default_partition (instead of min-cut rematerialization)",
        _apply_no_recompute,
        _training,
        training_only=True,
    ),
    Toggle(
        "emulate_precision_casts",
        "round fp16/bf16 values where eager would (on; Inductor default is off)",
        "emulate_precision_casts=True",
        _config("emulate_precision_casts", emulate_precision_casts=True),
        _low_precision,
    ),
    Toggle(
        "split_reductions",
        "large reductions are not split into two-stage reductions (Inductor default splits)",
        "split_reductions=False",
        _config("split_reductions", split_reductions=False),
        _split_candidates,
    ),
    Toggle(
        "layout_optimization",
        "convolutions keep eager's memory layout (Inductor default converts them and their neighbours to "
        "channels-last, which changes the convolution algorithm and its summation order)",
        "layout_optimization=False",
        _config("layout_optimization", layout_optimization=False),
        _needs("conv", "not applicable: no convolution in the graph"),
    ),
    Toggle(
        "fallback_random",
        "random ops use eager's (aten) RNG instead of Inductor's, so random values match eager",
        "fallback_random=True",
        _config("fallback_random", fallback_random=True),
        _needs("random", "not applicable: no random op in the graph"),
    ),
    Toggle(
        "max_autotune",
        "autotuned matmul/conv templates on, with their epilogue/prologue fusion (fusion.template's reference)",
        "max_autotune=True, benchmark_epilogue_fusion=False (every legal epilogue is fused, not only those a "
        "benchmark favours, so that fusion.template's difference is deterministic)",
        _config("max_autotune", max_autotune=True, benchmark_epilogue_fusion=False),
        _needs("matmul", "not applicable: no matmul or convolution in the graph"),
    ),
]

# Inductor's own numerics knobs, templates.off and upstream modes live in their own modules (one job each).
from .numerics import ENTRIES as _NUMERICS  # noqa: E402
from .templates import TEMPLATES_OFF  # noqa: E402
from .upstream import ENTRIES as _UPSTREAM  # noqa: E402

TOGGLES: dict[str, Toggle] = {t.name: t for t in [*_ENTRIES, TEMPLATES_OFF, *_NUMERICS, *_UPSTREAM]}
