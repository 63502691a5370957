"""Parameters grouped per block and per kind, so a drift can be read as "layer 3" or "every LayerNorm weight".

Blocks are the streamed golden's (fusecheck/golden/streamed/plan.py: the children of the model's largest
layer stack, or `--blocks GLOB`); a parameter outside them is in "(outside blocks)". A kind is the class of
the module that owns the parameter and the parameter's own name: `Linear.weight`, `LayerNorm.bias`.
"""
from __future__ import annotations

import torch

from fusecheck.golden.streamed.plan import find_blocks

OUTSIDE = "(outside blocks)"


def parameter_groups(model: torch.nn.Module, names: list[str], pattern: str | None = None) -> dict[str, dict[str, list[str]]]:
    """{"block": {block: [param names]}, "kind": {kind: [param names]}} over `names`, in model order."""
    blocks, _ = find_blocks(model, pattern)
    prefixes = [(b if b.endswith(".") else b + ".", b) for b, _ in blocks]
    owners = dict(model.named_modules())
    by_block: dict[str, list[str]] = {}
    by_kind: dict[str, list[str]] = {}
    for name in names:
        block = next((b for prefix, b in prefixes if name.startswith(prefix)), OUTSIDE)
        owner, _, leaf = name.rpartition(".")
        kind = f"{type(owners.get(owner, model)).__name__}.{leaf}"
        by_block.setdefault(block, []).append(name)
        by_kind.setdefault(kind, []).append(name)
    return {"block": by_block, "kind": by_kind}
