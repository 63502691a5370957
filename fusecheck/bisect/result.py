"""What a bisection finds: the culprits (each decision with the trials that blame it) and the result the
reports read. Apart from the search so that the reports and the backend bisection need not import it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fusecheck.bisect.gates import Decision


@dataclass
class Culprit:
    decision: Decision
    partial: bool                  # holding it off improves the error but the verdict still fails
    with_it: dict[str, Any]        # trial summary with the decision allowed
    without_it: dict[str, Any]     # trial summary with it held off
    family_off_passed: bool
    kernels: list[str] = field(default_factory=list)
    alternatives: list[str] = field(default_factory=list)  # other families/decisions that also fixed it
    enabled_by: list[str] = field(default_factory=list)    # families that only enable or expose it, and why

    @property
    def chain(self) -> str:
        """`pass X introduces; refusing decomposition Y hides it because X only matches its output`."""
        return "; ".join([f"{self.decision.kind} {self.decision.name} introduces"] + self.enabled_by)

    def to_dict(self) -> dict[str, Any]:
        return {**self.decision.to_dict(), "partial": self.partial, "kernels": self.kernels,
                "with": self.with_it, "without": self.without_it, "family_off_passed": self.family_off_passed,
                "alternatives": self.alternatives, "enabled_by": self.enabled_by, "chain": self.chain}


@dataclass
class BisectResult:
    status: str                     # pass | nondeterministic | culprits | no_culprit | error
    message: str
    baseline: dict[str, Any] | None
    culprits: list[Culprit]
    compiles: int
    max_compiles: int
    decisions: dict[str, int]       # decisions counted per family in the baseline compile
    final: dict[str, Any] | None = None
    unavailable: dict[str, str] = field(default_factory=dict)
    kernels: list[Any] = field(default_factory=list)   # per-kernel attribution rows
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)
    no_inductor: int = 0            # of `compiles`: probes that ran no Inductor compile
    attribution: int = 0            # of `compiles`: per-kernel attribution after the search

    @property
    def exit_code(self) -> int:
        return {"pass": 0, "culprits": 1, "cannot_judge": 2}.get(self.status, 3)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "exit_code": self.exit_code,
                "compiles": self.compiles, "max_compiles": self.max_compiles, "decisions": self.decisions,
                "baseline": self.baseline, "final": self.final,
                "culprits": [c.to_dict() for c in self.culprits], "unavailable": self.unavailable,
                "kernels": [k.to_dict() if hasattr(k, "to_dict") else k for k in self.kernels],
                "seconds": self.seconds, "log": self.log, "no_inductor": self.no_inductor,
                "attribution": self.attribution}
