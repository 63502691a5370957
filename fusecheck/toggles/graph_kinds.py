"""Classify FX nodes (aten-level or Dynamo-level graphs) into the op kinds toggles care about.

Used only for applicability ("a reduction toggle on a graph with no reduction is not applicable").
aten ops are classified by their own tags (``torch.Tag.reduction`` / ``torch.Tag.pointwise``);
Dynamo-level graphs (torch functions, tensor methods, modules) by name tables below.
"""
from __future__ import annotations

import operator
from collections import Counter
from typing import Any

import torch

REDUCTION_NAMES = frozenset(
    "sum mean amax amin max min argmax argmin prod var std var_mean std_mean norm logsumexp softmax "
    "log_softmax layer_norm group_norm batch_norm instance_norm rms_norm cross_entropy nll_loss "
    "mse_loss l1_loss cumsum cumprod any all scaled_dot_product_attention".split()
)
MATMUL_NAMES = frozenset(
    "mm addmm bmm baddbmm matmul linear conv1d conv2d conv3d convolution einsum addbmm _int_mm "
    "scaled_dot_product_attention".split()
)
CONV_NAMES = frozenset(
    "conv1d conv2d conv3d convolution _convolution conv_transpose1d conv_transpose2d conv_transpose3d "
    "convolution_backward".split()
)
FOREACH_PREFIX = "_foreach_"
RANDOM_NAMES = frozenset(
    "rand rand_like randn randn_like randint randint_like dropout bernoulli native_dropout "
    "multinomial normal uniform".split()
)
CAT_NAMES = frozenset("cat concat concatenate stack hstack vstack".split())
VIEW_NAMES = frozenset(
    "view reshape permute transpose t expand squeeze unsqueeze flatten contiguous getitem "
    "split chunk unbind slice select size clone to type_as detach alias".split()
)
MODULE_KINDS = {
    "Linear": "matmul", "Conv1d": "matmul", "Conv2d": "matmul", "Conv3d": "matmul",
    "LayerNorm": "reduction", "GroupNorm": "reduction", "BatchNorm1d": "reduction",
    "BatchNorm2d": "reduction", "BatchNorm3d": "reduction", "RMSNorm": "reduction",
    "Softmax": "reduction", "LogSoftmax": "reduction", "MultiheadAttention": "matmul",
    "Dropout": "random",
}
_POINTWISE_OPERATORS = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.pow, operator.neg,
    operator.floordiv, operator.mod, operator.iadd, operator.imul, operator.isub, operator.itruediv,
}


def _name_of(target: Any) -> str:
    if isinstance(target, str):
        return target
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        name = target.__name__.split(".")[0]
        return name
    return getattr(target, "__name__", str(target))


def _aten_tags(name: str) -> set[Any]:
    packet = getattr(torch.ops.aten, name.rstrip("_"), None)
    if packet is None:
        return set()
    tags: set[Any] = set()
    for overload in ("default", "Tensor", "dim_IntList", "int", "dim"):
        op = getattr(packet, overload, None)
        if op is not None:
            tags.update(op.tags)
    return tags


def node_kinds(node: torch.fx.Node, gm: torch.fx.GraphModule | None = None) -> set[str]:
    """Kinds of one node: subset of {reduction, pointwise, matmul, conv, foreach, random, cat, view}."""
    kinds: set[str] = set()
    if node.op == "call_module" and gm is not None:
        try:
            mod = gm.get_submodule(str(node.target))
        except AttributeError:
            return kinds
        kind = MODULE_KINDS.get(type(mod).__name__)
        kinds.add(kind or "pointwise")  # activations and other leaf modules are elementwise
        if type(mod).__name__.startswith("Conv"):  # ConvNd and ConvTransposeNd
            kinds.add("conv")
        return kinds
    if node.op not in ("call_function", "call_method"):
        return kinds
    target = node.target
    if target in _POINTWISE_OPERATORS:
        return {"pointwise"}
    name = _name_of(target)
    if name.startswith(FOREACH_PREFIX):
        kinds.add("foreach")
        name = name[len(FOREACH_PREFIX):]
    base = name.lstrip("_")
    if isinstance(target, torch._ops.OpOverload):
        tags = set(target.tags)
    else:
        tags = _aten_tags(base)
    if torch.Tag.reduction in tags or base in REDUCTION_NAMES:
        kinds.add("reduction")
    if base in MATMUL_NAMES:
        kinds.add("matmul")
    if base in CONV_NAMES:
        kinds.add("conv")
    if base in RANDOM_NAMES:
        kinds.add("random")
    if base in CAT_NAMES:
        kinds.add("cat")
    if base in VIEW_NAMES:
        kinds.add("view")
    if torch.Tag.pointwise in tags or (not kinds and base not in VIEW_NAMES and _is_elementwise(base)):
        kinds.add("pointwise")
    return kinds


def _is_elementwise(name: str) -> bool:
    return torch.Tag.pointwise in _aten_tags(name) or name in {
        "gelu", "relu", "silu", "sigmoid", "tanh", "softplus", "hardswish", "leaky_relu", "elu", "mish",
    }


def graph_kind_counts(gm: torch.fx.GraphModule) -> Counter[str]:
    counts: Counter[str] = Counter()
    for node in gm.graph.nodes:
        counts.update(node_kinds(node, gm))
    return counts


def float_dtypes(gm: torch.fx.GraphModule) -> set[torch.dtype]:
    """Floating dtypes of every tensor value recorded in node meta (``val`` or ``example_value``)."""
    found: set[torch.dtype] = set()

    def visit(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            if v.dtype.is_floating_point:
                found.add(v.dtype)
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)

    for node in gm.graph.nodes:
        visit(node.meta.get("val", node.meta.get("example_value")))
    for p in list(gm.parameters()) + list(gm.buffers()):
        if p.dtype.is_floating_point:
            found.add(p.dtype)
    return found


def requires_grad(gm: torch.fx.GraphModule) -> bool:
    """True if any placeholder/parameter value requires grad (a training graph)."""
    for node in gm.graph.nodes:
        v = node.meta.get("val", node.meta.get("example_value"))
        if isinstance(v, torch.Tensor) and v.requires_grad:
            return True
    return any(p.requires_grad for p in gm.parameters())


def has_shared_reads(gm: torch.fx.GraphModule) -> bool:
    """True if some value feeds two or more compute ops (candidates for horizontal fusion)."""
    for node in gm.graph.nodes:
        compute_users = [u for u in node.users if node_kinds(u, gm) - {"view"}]
        if len(compute_users) >= 2:
            return True
    return False
