"""Decomposition gate: each application of an entry of Inductor's decomposition table during tracing.

Inductor asks `torch._inductor.compile_fx.select_decomp_table()` for its table on every compile; the gate
wraps each entry so a refused application returns NotImplemented, which leaves the op for Inductor to
lower (or for its CompositeImplicit decomposition). Works with tables patched by users, including
entries added after `fast_random_decomps`'s cache was filled, because it wraps what the call returns.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

from fusecheck.bisect.gates.base import DecisionLog, GateUnavailable


def traced_from() -> list[str]:
    """The FX node of the captured (pre-grad) graph being traced right now, when AOT preserves node meta."""
    try:
        from torch.fx.traceback import get_current_meta
        meta = get_current_meta() or {}
    except Exception:  # pragma: no cover - meta tracking is best effort
        return []
    stack = meta.get("source_fn_stack") or []
    return [str(stack[-1][0])] if stack else []


def _wrap(op: Any, fn: Callable[..., Any], log: DecisionLog) -> Callable[..., Any]:
    name = str(op)

    @functools.wraps(fn)
    def gated(*args: Any, **kwargs: Any) -> Any:
        where = getattr(fn, "__module__", "?") + "." + getattr(fn, "__qualname__", getattr(fn, "__name__", "?"))
        if not log.decide("decomposition", name, f"decompose {name} with {where}", traced_from(), [name]):
            return NotImplemented
        return fn(*args, **kwargs)

    return gated


def install(log: DecisionLog):
    try:
        from torch._inductor import compile_fx
    except ImportError as exc:  # pragma: no cover
        raise GateUnavailable(f"decomposition gate: {exc}") from exc
    if not callable(getattr(compile_fx, "select_decomp_table", None)):
        raise GateUnavailable("decomposition gate needs torch._inductor.compile_fx.select_decomp_table")
    return _patched(compile_fx, log)


@contextlib.contextmanager
def _patched(module: Any, log: DecisionLog) -> Iterator[None]:
    orig = module.select_decomp_table

    from torch._inductor.lowering import lowerings

    def select_decomp_table() -> dict[Any, Callable[..., Any]]:
        # Only ops Inductor can also lower itself are decisions: refusing any other decomposition would
        # leave an op with neither a decomposition nor a lowering (Inductor asserts on that).
        return {op: (_wrap(op, fn, log) if op in lowerings else fn) for op, fn in orig().items()}

    module.select_decomp_table = select_decomp_table
    try:
        yield
    finally:
        module.select_decomp_table = orig
