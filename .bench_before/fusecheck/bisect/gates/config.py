"""Config gate: Inductor settings whose default trades accuracy for speed. Each flip is one decision;
"allowed" keeps Inductor's default, "refused" applies the accuracy-preserving value for the compile."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from fusecheck.bisect.gates.base import DecisionLog

# (config key, accuracy-preserving value, why it can matter). Order is the decision order.
FLIPS: list[tuple[str, Any, str]] = [
    ("emulate_precision_casts", True, "keep eager's low-precision roundings of pointwise ops"),
    ("split_reductions", False, "no two-stage reductions (changes summation order)"),
    ("fallback_random", True, "random ops as in eager"),
    ("layout_optimization", False, "no channels-last layout changes"),
    ("comprehensive_padding", False, "no stride padding"),
]


def _get(cfg: Any, key: str) -> Any:
    obj = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


@contextlib.contextmanager
def install(log: DecisionLog) -> Iterator[None]:
    from torch._inductor import config as cfg

    patch = {}
    for key, safe, why in FLIPS:
        try:
            current = _get(cfg, key)
        except AttributeError:
            continue  # not in this torch: nothing to decide
        if current == safe:
            continue
        if not log.decide("config", key, f"config {key}={current!r} (eager-like: {safe!r}; {why})", [], [key]):
            patch[key] = safe
    with cfg.patch(patch) if patch else contextlib.nullcontext():
        yield
