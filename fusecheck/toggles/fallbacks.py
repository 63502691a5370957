"""Ops made to fall back to their aten kernel on purpose, and Inductor's lowering registries left as found.

Both the `decompositions` toggle and the bisector's decomposition gate keep ops from being decomposed, so
they reach lowering and get implicit fallbacks. Two things follow, handled here once:
- ``make_fallback`` raises when the op has a decomposition anywhere in torch, always under ``CI`` (a guard
  for Inductor's own developers) and on torch 2.11 whenever the op is in ``lowering.decompositions``. For
  an op skipped deliberately the fallback says so (``override_decomp``).
- ``make_fallback`` writes into module-level registries (the lowering table, the fallback set, realized
  inputs, layout constraints) that outlive the compile; they are restored in place on exit (other modules
  hold these very objects), so the next compile sees Inductor as it was.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import MutableSet
from typing import Any, Callable, Iterator
from unittest import mock

# what make_fallback writes into torch._inductor.lowering
REGISTRIES = ("lowerings", "fallbacks", "needs_realized_inputs", "_maybe_layout_constraints")


@contextlib.contextmanager
def deliberate_fallbacks(deliberate: Callable[[Any], bool] = lambda op: True) -> Iterator[None]:
    """Inside: fallbacks for ops where `deliberate(op)` holds are marked as overriding a decomposition.
    On exit: every registry `make_fallback` writes is put back as it was."""
    from torch._inductor import graph as graph_mod, lowering

    orig = graph_mod.make_fallback
    saved = {name: (dict(obj) if isinstance(obj, dict) else list(obj)) for name in REGISTRIES
             if isinstance(obj := getattr(lowering, name, None), (dict, MutableSet))}

    @functools.wraps(orig)
    def make_fallback(op: Any, *args: Any, **kwargs: Any) -> Any:
        if deliberate(op):
            kwargs["override_decomp"] = True
        return orig(op, *args, **kwargs)

    try:
        with mock.patch.object(graph_mod, "make_fallback", make_fallback):
            yield
    finally:
        for name, before in saved.items():
            live = getattr(lowering, name)
            live.clear()
            if isinstance(live, dict):
                live.update(before)
            else:
                for item in before:
                    live.add(item)


@contextlib.contextmanager
def decomposition_table(module: Any, table: dict[Any, Any]) -> Iterator[None]:
    """Swap the tables that ``select_decomp_table`` reads (module globals, looked up at call time).

    Ops that are no longer decomposed reach lowering and get implicit fallbacks, made deliberately
    (``passes.fallbacks``: the registries they write are restored on exit). ``make_fallback`` on torch 2.11
    reads ``lowering.decompositions`` instead of ``get_decomp_fn``: that global is swapped too.
    """
    from torch._inductor import lowering

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.multiple(module, decompositions=table, fast_random_decomps=lambda: table))
        if getattr(lowering, "decompositions", None) is not None:
            stack.enter_context(mock.patch.object(lowering, "decompositions", table))
        stack.enter_context(deliberate_fallbacks())
        yield
