"""`fusecheck dist`: layered validation of fused communication + compute kernels.

spec (DistSpec) -> rank pool runs layers 1-3 on every rank -> compare -> per-rank verdicts -> diagnosis -> report.

The names below are imported on first use (PEP 562), so that `python -m fusecheck.distributed -h` answers
without loading torch; `from fusecheck.distributed import DistSpec, ops, workspace` works as before.
"""
from __future__ import annotations

import importlib

__all__ = ["DistSpec", "load_spec", "seeded_randn", "COLLECTIVES", "Collective", "chunk_bounds", "ops", "workspace"]

_WHERE = {"DistSpec": "spec", "load_spec": "spec", "seeded_randn": "spec", "COLLECTIVES": "collectives",
          "Collective": "collectives", "chunk_bounds": "tiling"}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    if name in ("ops", "workspace"):  # kernels use these helpers
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
