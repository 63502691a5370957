"""Batch invariance, measured: the compiled model (under a row's toggles) runs on the batch, on its first
half, and on a larger batch (the batch followed by its rows reversed); every output row shared between two
runs must have the same bits. Forward only, no grad: the promise is about a row's result, and a parameter
gradient is a sum over the batch by definition.

The batch dimension is dimension 0 of the first tensor input; tensors whose dimension 0 has that size are
sliced or extended, the others (a shared mask, a table) are passed as they are. Dynamo recompiles for the
new sizes as it would in use (size 1 is specialised, a third size may compile with dynamic shapes): the
promise is about what a user's varying batches get.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._pytree import tree_leaves, tree_map


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        a, b = a.contiguous().view(ints), b.contiguous().view(ints)
    return torch.equal(a, b)


def batch_size(inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    first = next((t for t in tree_leaves((inputs, kwargs)) if isinstance(t, torch.Tensor) and t.dim() >= 1), None)
    return None if first is None else int(first.shape[0])


def _resize(tree: Any, b: int, how: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    return tree_map(lambda t: how(t) if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[0] == b else t, tree)


def _batches(inputs: tuple[Any, ...], kwargs: dict[str, Any], b: int) -> dict[str, tuple[Any, Any, int]]:
    """name -> (inputs, kwargs, rows shared with the batch: the first k)."""
    half = b // 2
    return {
        "batch": (inputs, kwargs, b),
        "sub-batch": (_resize(inputs, b, lambda t: t[:half].clone()), _resize(kwargs, b, lambda t: t[:half].clone()),
                      half),
        "larger batch": (_resize(inputs, b, lambda t: torch.cat([t, t.flip(0)])),
                         _resize(kwargs, b, lambda t: torch.cat([t, t.flip(0)])), b),
    }


def _differences(fn: Callable[..., Any], batches: dict[str, tuple[Any, Any, int]], b: int) -> list[str]:
    outs = {}
    with torch.no_grad():
        for name, (args, kw, _) in batches.items():
            outs[name] = [t for t in tree_leaves(fn(*args, **kw)) if isinstance(t, torch.Tensor)]
    full = outs["batch"]
    found = []
    for name, (_, _, k) in batches.items():
        if name == "batch":
            continue
        for i, (ref, got) in enumerate(zip(full, outs[name])):
            if ref.dim() == 0 or ref.shape[0] != b:
                continue  # no batch dimension in this output
            if not _same_bits(ref[:k], got[:k]):
                rows = sum(not _same_bits(ref[j], got[j]) for j in range(k))
                found.append(f"output {i}: {rows} of {k} rows differ in the {name} (size "
                             f"{got.shape[0] if got.dim() else 0})")
    return found


def check_batch_invariance(model: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any],
                           compiled: Callable[[], Any]) -> tuple[str | None, str]:
    """(None, what was run) when kept; ("broken" | "unverified", why) otherwise. `compiled()` returns the
    compiled callable, built inside the caller's toggles."""
    b = batch_size(inputs, kwargs)
    if b is None or b < 2:
        return "unverified", f"needs a batch of at least 2 rows in dimension 0 of the first input (got {b})"
    batches = _batches(inputs, kwargs, b)
    with torch.no_grad():
        outs = [t for t in tree_leaves(model(*inputs, **kwargs)) if isinstance(t, torch.Tensor)]
    if not any(t.dim() >= 1 and t.shape[0] == b for t in outs):
        return "unverified", f"no output has the batch dimension (size {b} in dimension 0)"
    found = _differences(compiled(), batches, b)
    sizes = f"batch {b}, sub-batch {b // 2}, larger batch {2 * b}"
    if not found:
        return None, f"kept on {sizes}"
    eager = _differences(model, batches, b)
    told = ("eager varies too here: " + "; ".join(eager[:2])) if eager else "eager's rows are batch invariant here"
    return "broken", "; ".join(found[:3]) + f" ({sizes}; {told})"
