"""`CheckOptions`: everything a check is asked to do, in one value (the CLI, the pytest fixture, the matrix,
the bisect objective and the sharded rank all build one; the pipeline's stages read it).

torch-free at import, so that `fusecheck check -h` and the CLI's argument handling never load torch.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fusecheck.case import TargetError

GOLDEN_CHOICES = ("auto", "streamed", "whole")


# compiled calls a check makes: the first (judged against the golden), a repeat, one on rolled inputs, the first
# inputs again; --calls adds more on the first inputs (an artifact that goes wrong only after some calls)
MIN_CALLS = 4


@dataclass(frozen=True)
class CheckOptions:
    """`backend`: a registered name, FILE.py:NAME or a dynamo backend callable. `dtype`: a name (fp32,
    bf16...), a torch.dtype or None (the model's own). `golden`: auto / streamed / whole. `blocks`: a glob of
    block names (default: the children of the largest layer stack, plan.find_blocks). `regional`: compile
    each block on its own. `golden_device`: where the golden computes (default: `device`). `tf32`: keep the
    process's TF32 flags on CUDA (by default fp32 runs without TF32)."""

    backend: Any = "inductor"
    dtype: Any = None
    device: str = "cpu"
    train: bool = False
    policy: Any = None
    toggles: tuple[str, ...] = ()
    seed: int = 0
    golden: str = "auto"
    blocks: str | None = None
    regional: bool = False
    golden_device: str | None = None
    block_verdicts: bool = True
    tf32: bool = False
    calls: int = MIN_CALLS

    def __post_init__(self) -> None:
        object.__setattr__(self, "toggles", tuple(self.toggles or ()))
        if not isinstance(self.calls, int) or self.calls < MIN_CALLS:
            raise TargetError(f"--calls {self.calls!r}: at least {MIN_CALLS} (the first call, a repeat, a call on "
                              "other inputs, the first inputs again)")

    def replace(self, **changes: Any) -> "CheckOptions":
        return dataclasses.replace(self, **changes)

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_args(cls, args: Any, **changes: Any) -> "CheckOptions":
        """The options a parsed command line asks for (only the attributes it has; `--toggle a,b` split)."""
        values = {k: getattr(args, k) for k in cls.fields() if hasattr(args, k)}
        if isinstance(values.get("toggles"), str):
            values["toggles"] = tuple(t.strip() for t in values["toggles"].split(",") if t.strip())
        return cls(**{**values, **changes})
