"""The report of one check, and the rule that turns rows into an exit code (one place: the sharded ranks
and the single-process check use it alike)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from fusecheck.capture import CapturedGraph
from fusecheck.compare import Comparison, Status
from fusecheck.policy import Policy
from fusecheck.golden.streamed.per_block import BlockVerdict, first_worse


def rows_exit_code(rows: Iterable[Comparison]) -> int:
    """2 when a row cannot be judged (an ERROR verdict), else 1 when a row fails, else 0."""
    rows = list(rows)
    if any(r.verdict.status is Status.ERROR for r in rows):
        return 2
    return 0 if all(r.passed for r in rows) else 1


@dataclass
class CheckReport:
    case: str
    backend: str
    dtype: str
    device: str
    train: bool
    seed: int
    policy: Policy
    rows: list[Comparison]
    graphs: list[CapturedGraph]
    notes: list[str] = field(default_factory=list)
    toggles: tuple[str, ...] = ()
    census: Any = None
    eager_repeatable: bool = True
    compiled_repeatable: bool = True
    movement_only: bool = False
    seconds: dict[str, float] = field(default_factory=dict)
    golden_mode: str = "whole"     # how the golden ran: "whole" or "streamed (...)"
    regional: bool = False
    blocks: list[BlockVerdict] = field(default_factory=list)
    memory: dict[str, dict[str, int]] = field(default_factory=dict)
    model_bytes: int = 0           # parameters and buffers in the run dtype: the yardstick for `memory`
    model_signature: str = ""      # check/signature.py: which model a baseline made from this report is for

    @property
    def first_worse_block(self) -> str | None:
        return first_worse(self.blocks)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rows)

    @property
    def exit_code(self) -> int:
        return rows_exit_code(self.rows)

    @property
    def status(self) -> str:
        return {0: "PASS", 1: "FAIL", 2: "ERROR"}[self.exit_code]

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case, "backend": self.backend, "dtype": self.dtype, "device": self.device,
            "train": self.train, "seed": self.seed, "status": self.status, "exit_code": self.exit_code,
            "toggles": list(self.toggles), "eager_repeatable": self.eager_repeatable,
            "compiled_repeatable": self.compiled_repeatable, "movement_only": self.movement_only,
            "notes": list(self.notes), "policy": self.policy.to_dict(),
            "graphs": [g.to_dict() for g in self.graphs], "rows": [r.to_dict() for r in self.rows],
            "census": self.census.to_dict() if self.census is not None and hasattr(self.census, "to_dict") else None,
            "seconds": self.seconds, "golden_mode": self.golden_mode, "regional": self.regional,
            "blocks": [b.to_dict() for b in self.blocks], "first_worse_block": self.first_worse_block,
            "memory": self.memory, "model_bytes": self.model_bytes, "model_signature": self.model_signature,
        }
