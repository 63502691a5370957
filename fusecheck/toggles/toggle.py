"""The Toggle record: one registry entry, backend-neutral name plus how it is applied to Inductor."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

# applies_to(gm) -> True when the toggle can change this graph, else a reason ("no reduction in the graph").
AppliesTo = Callable[[torch.fx.GraphModule], "bool | str"]
# apply(stack) enters the toggle's patches on ``stack``; raises ToggleUnsupported before touching anything.
Apply = Callable[[contextlib.ExitStack], None]


@dataclass(frozen=True)
class Toggle:
    name: str
    doc: str  # one line: what it does
    how: str  # one line: how it is applied to Inductor
    apply: Apply = field(repr=False, compare=False)
    applies_to: AppliesTo = field(repr=False, compare=False)
    # Toggles that must be on in this toggle's reference row (fusion.template compares against
    # max_autotune, so that the difference is the template fusion alone).
    reference: tuple[str, ...] = ()
    # Other toggle names this one switches on as well (fusion.template implies max_autotune).
    implies: tuple[str, ...] = ()
    # Acts on the backward graph only (the partitioner): not applicable to an inference run.
    training_only: bool = False
    # What the compiler promises under this toggle beyond "not worse than eager" (passes/promises.py names);
    # the matrix checks each promise on the toggle's row.
    promises: tuple[str, ...] = ()

    def check(self) -> None:
        """Raise ToggleUnsupported if the installed torch cannot apply this toggle (touches nothing)."""
        self.apply(_DryStack())  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "doc": self.doc, "how": self.how, "reference": list(self.reference),
                "promises": list(self.promises), "training_only": self.training_only}


class _DryStack:
    """Stands in for an ExitStack during ``check``: context managers are validated but never entered."""

    def enter_context(self, cm: Any) -> None:
        close = getattr(cm, "close", None)  # generator-based CMs: discard without running
        if close is not None:
            close()
