"""`fusecheck op`: gate a hand-written single-device fused kernel against the unfused chain it replaces.

    from fusecheck.op import OpSpec, seeded_randn, check_op

Names are loaded lazily: `fusecheck op -h` imports this package and must not load torch.
"""
from __future__ import annotations

import importlib

_EXPORTS = {"OpSpec": "fusecheck.op.spec", "seeded_randn": "fusecheck.op.spec", "SpecError": "fusecheck.op.spec",
            "KernelError": "fusecheck.op.spec", "load_spec": "fusecheck.op.spec", "check_op": "fusecheck.op.run",
            "OpReport": "fusecheck.op.report", "format_op_report": "fusecheck.op.report",
            "PROPAGATION": "fusecheck.op.probes"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'fusecheck.op' has no attribute {name!r}")
