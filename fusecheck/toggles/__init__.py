"""Per-fusion-type toggles for Inductor: registry, scoped application, kernel census, veto hooks.

    TOGGLES                         name -> Toggle (doc, how, applies_to)
    toggled(names)                  context manager: validate, apply, restore; nestable; cache-separated
    applicability(names, graphs)    name -> None (applies) or "not applicable: <reason>"
    not_applying(names, graphs)     the same as notes for a report (a toggle that did nothing is said)
    census.collecting_census()      which FX nodes went into which kernel, from Inductor's provenance
    hooks.fusion_veto / inline_veto the bisector's extension points
"""
from __future__ import annotations

from typing import Sequence

import torch

from .catalog import TOGGLES
from .errors import ToggleError, ToggleUnsupported
from .scope import active, resolve, toggled
from .toggle import Toggle

__all__ = [
    "TOGGLES",
    "Toggle",
    "ToggleError",
    "ToggleUnsupported",
    "toggled",
    "applicability",
    "resolve",
    "active",
    "not_applying",
]


def applicability(
    names: Sequence[str] | str | None,
    graphs: list[torch.fx.GraphModule],
    *,
    train: bool | None = None,
) -> dict[str, str | None]:
    """For each toggle: None if it can change at least one of ``graphs``, else the reason it cannot.

    ``names=None`` means every registered toggle. ``train`` (when known) overrides the graph-based guess
    for training-only toggles. With no graphs at all every toggle is assumed to apply.
    """
    toggles = [TOGGLES[n] for n in TOGGLES] if names is None else resolve(names)
    out: dict[str, str | None] = {}
    for t in toggles:
        if not graphs:
            out[t.name] = None
            continue
        if t.training_only and train is not None:
            out[t.name] = None if train else "not applicable: inference run (no backward to partition)"
            continue
        reasons = [t.applies_to(gm) for gm in graphs]
        if any(r is True for r in reasons):
            out[t.name] = None
        else:
            reason = next((r for r in reasons if isinstance(r, str)), "not applicable")
            out[t.name] = reason if reason.startswith("not applicable") else f"not applicable: {reason}"
    return out


def not_applying(
    names: Sequence[str] | str, graphs: list[torch.fx.GraphModule], *, train: bool
) -> list[str]:
    """A note for each requested toggle that cannot act on this run (`partitioner.no_recompute` on a
    forward-only check, a Triton-only knob on the CPU...): a toggle that did nothing is said, not silent."""
    reasons = applicability(names, graphs, train=train)
    return [f"toggle {name} does not apply to this run ({why.removeprefix('not applicable: ')}): its result "
            "is the run without it" for name, why in reasons.items() if why]
