"""Registry of compile backends: a name, or `FILE.py:NAME` for a user's own dynamo backend.

`is_inductor` tells toggles whether a backend is Inductor (toggles act on Inductor internals only).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from fusecheck.case import TargetError, load_object


@dataclass(frozen=True)
class Backend:
    name: str
    doc: str
    make: Callable[[], Callable[..., Any]]
    is_inductor: bool = False
    # registered backends get fusecheck's decision taps appended to their graphs (decisions/tap.py); a
    # user's backend receives the model's own graph, outputs and calling convention, untouched
    user: bool = False


BACKENDS: dict[str, Backend] = {
    "inductor": Backend("inductor", "torch.compile's default fusing compiler",
                        lambda: torch._dynamo.lookup_backend("inductor"), is_inductor=True),
    "aot_eager": Backend("aot_eager", "AOTAutograd tracing without fusion (a control)",
                         lambda: torch._dynamo.lookup_backend("aot_eager")),
    "aot_eager_decomp_partition": Backend("aot_eager_decomp_partition",
                                          "AOTAutograd with Inductor's decompositions and partitioner, no codegen",
                                          lambda: torch._dynamo.lookup_backend("aot_eager_decomp_partition")),
    "eager": Backend("eager", "runs the captured FX graph as is (a control)",
                     lambda: torch._dynamo.lookup_backend("eager")),
}


def resolve_backend(spec: str | Callable[..., Any]) -> Backend:
    """A registered name, `FILE.py:NAME`, or a dynamo backend function itself (the pytest fixture's users
    pass one: `backend=my_backend`)."""
    if callable(spec) and not isinstance(spec, str):
        fn = spec
        return Backend(getattr(fn, "__name__", type(fn).__name__), "user backend (a callable)", lambda: fn, user=True)
    if not isinstance(spec, str):
        raise TargetError(f"backend {spec!r} is neither a name, FILE.py:NAME nor a callable dynamo backend")
    if spec in BACKENDS:
        return BACKENDS[spec]
    if ":" in spec:
        fn = load_object(spec)
        if not callable(fn):
            raise TargetError(f"backend {spec!r} is not callable")
        return Backend(spec, "user backend", lambda: fn, user=True)
    raise TargetError(f"unknown backend {spec!r}; registered: {', '.join(BACKENDS)}, or FILE.py:NAME")
