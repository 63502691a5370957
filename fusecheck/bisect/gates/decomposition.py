"""Decomposition gate: each application of an entry of Inductor's decomposition table during tracing.

Inductor asks `torch._inductor.compile_fx.select_decomp_table()` for its table on every compile; the gate
wraps each entry so a refused application returns NotImplemented, which leaves the op in the graph: Inductor
lowers it itself or, with no lowering, calls the aten kernel through an implicit fallback (or the op's
CompositeImplicit decomposition applies). Every entry is gated, not only ops Inductor lowers: a wrong
decomposition of e.g. native_layer_norm is as likely as one of var_mean. A refusal that leaves something
uncompilable fails that probe only (the search reports the compile error). Entries that only alias or
return their input (views, detach, alias, nop_decomposition) are never decisions: refusing them changes
the graph's structure (and with it which pattern-conditional passes fire) without changing arithmetic.

Implicit fallbacks made for refused ops are deliberate ones (`fusecheck.toggles.fallbacks`, shared with the
`decompositions` toggle): `make_fallback` is told the op's decomposition was overridden, and the registries
it writes are restored on exit, so the gate leaves Inductor's tables as it found them.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator
from unittest import mock

from fusecheck.bisect.gates.base import DecisionLog, GateUnavailable
from fusecheck.toggles.fallbacks import deliberate_fallbacks

# decompositions that copy or re-wrap their input: no arithmetic to be wrong about
_NOOP_FNS = ("nop_decomposition", "noop", "_noop")
_NOOP_OPS = ("clone", "_unsafe_view", "lift_fresh_copy", "detach", "alias")


def is_noop(op: Any, fn: Callable[..., Any]) -> bool:
    """True for view / alias / in-place-return / pure-copy entries, which are not decisions."""
    if getattr(op, "is_view", False) or getattr(fn, "__name__", "") in _NOOP_FNS:
        return True
    schema = getattr(op, "_schema", None)
    if schema is not None and any(r.alias_info is not None for r in schema.returns):
        return True
    name = op.name() if hasattr(op, "name") else str(op)
    return name.split("::")[-1].split(".")[0] in _NOOP_OPS


def traced_from() -> list[str]:
    """The FX node of the captured (pre-grad) graph being traced right now, when AOT preserves node meta."""
    try:
        from torch.fx.traceback import get_current_meta
        meta = get_current_meta() or {}
    except Exception:  # pragma: no cover - meta tracking is best effort
        return []
    stack = meta.get("source_fn_stack") or []
    return [str(stack[-1][0])] if stack else []


def _wrap(op: Any, fn: Callable[..., Any], log: DecisionLog, refused: set) -> Callable[..., Any]:
    name = str(op)

    @functools.wraps(fn)
    def gated(*args: Any, **kwargs: Any) -> Any:
        where = getattr(fn, "__module__", "?") + "." + getattr(fn, "__qualname__", getattr(fn, "__name__", "?"))
        if not log.decide("decomposition", name, f"decompose {name} with {where}", traced_from(), [name]):
            refused.add(op)
            return NotImplemented
        return fn(*args, **kwargs)

    return gated


def install(log: DecisionLog):
    try:
        from torch._inductor import compile_fx, graph as graph_mod, lowering
    except ImportError as exc:  # pragma: no cover
        raise GateUnavailable(f"decomposition gate: {exc}") from exc
    if not callable(getattr(compile_fx, "select_decomp_table", None)):
        raise GateUnavailable("decomposition gate needs torch._inductor.compile_fx.select_decomp_table")
    if not callable(getattr(graph_mod, "make_fallback", None)) or not hasattr(lowering, "lowerings"):
        raise GateUnavailable("decomposition gate needs torch._inductor.graph.make_fallback and lowering.lowerings")
    return _patched(compile_fx, log)


@contextlib.contextmanager
def _patched(module: Any, log: DecisionLog) -> Iterator[None]:
    orig = module.select_decomp_table
    refused: set = set()

    def select_decomp_table() -> dict[Any, Callable[..., Any]]:
        return {op: (fn if is_noop(op, fn) else _wrap(op, fn, log, refused)) for op, fn in orig().items()}

    # a refused decomposition is replaced by its fallback on purpose (passes.fallbacks restores the tables)
    with deliberate_fallbacks(lambda op: op in refused), \
            mock.patch.object(module, "select_decomp_table", select_decomp_table):
        yield
