"""How most toggles apply: a scoped patch of Inductor config keys, each key checked against this torch first
(a missing key is ToggleUnsupported, never a silent no-op). Shared by catalog.py, numerics.py and upstream.py."""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from . import graph_kinds as gk
from .compat import require_config

Apply = Callable[[contextlib.ExitStack], None]


def config_patch(name: str, **keys: Any) -> Apply:
    """Apply: patch these config keys (dotted keys reach nested classes: ``eager_numerics.disable_ftz``)."""
    def apply(stack: contextlib.ExitStack) -> None:
        from torch._inductor import config

        stack.enter_context(config.patch(require_config(keys, name)))

    return apply


def config_patches(name: str, keys: dict[str, Any]) -> Apply:
    """config_patch for keys that are not Python identifiers (dotted names)."""
    return config_patch(name, **keys)


def needs(kind: str, reason: str, minimum: int = 1) -> Callable[[torch.fx.GraphModule], bool | str]:
    """applies_to: the graph holds at least ``minimum`` ops of ``kind`` (graph_kinds), else ``reason``."""
    def applies_to(gm: torch.fx.GraphModule) -> bool | str:
        return gk.graph_kind_counts(gm)[kind] >= minimum or reason

    return applies_to


def always(gm: torch.fx.GraphModule) -> bool | str:
    return True


def low_precision(gm: torch.fx.GraphModule) -> bool | str:
    return bool(gk.float_dtypes(gm) & {torch.float16, torch.bfloat16}) or (
        "not applicable: no fp16/bf16 tensors in the graph"
    )


def training(gm: torch.fx.GraphModule) -> bool | str:
    return gk.requires_grad(gm) or "not applicable: inference graph (no backward to partition)"


def devices(gm: torch.fx.GraphModule) -> set[str]:
    """Device types of the tensors recorded in node meta, parameters and buffers."""
    found = {p.device.type for p in list(gm.parameters()) + list(gm.buffers())}
    for node in gm.graph.nodes:
        v = node.meta.get("val", node.meta.get("example_value"))
        for t in v if isinstance(v, (list, tuple)) else (v,):
            if isinstance(t, torch.Tensor):
                found.add(t.device.type)
    return found


def on_triton(then: Callable[[torch.fx.GraphModule], bool | str] = always
              ) -> Callable[[torch.fx.GraphModule], bool | str]:
    """applies_to for a knob only Triton codegen reads: CPU graphs compile to C++ and never see it."""
    def applies_to(gm: torch.fx.GraphModule) -> bool | str:
        if not devices(gm) & {"cuda", "xpu"}:
            return "not applicable: read by Triton codegen only (this graph compiles to C++ on the CPU)"
        return then(gm)

    return applies_to
