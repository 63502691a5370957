"""Veto hooks into Inductor's fusion decisions: the extension point for toggles and the bisector.

Two places decide what ends up in one kernel, and both are hooked here:

* **Scheduler fusion** (``fusion_veto``): Inductor asks ``V.choices.can_fuse(scheduler, node1, node2,
  score)`` before fusing two scheduler nodes. ``fusion_veto(fn)`` installs, for the current thread, a
  :class:`VetoChoices` handler that wraps whatever handler was active and calls
  ``fn(node1, node2, kind)`` first; ``kind`` is ``"vertical"`` (node2 reads node1) or ``"horizontal"``.
  It is asked only about pairs that Inductor's own ``can_fuse`` heuristics accept.
  Return ``True`` to veto (forbid) the fusion. Inductor may ask about the same pair more than once
  (speculative checks); a caller counting decisions should key them by
  ``(node1.get_name(), node2.get_name())``. Some paths skip the choices object (multi-output
  templates, nested/mix-order reduction groups); those cannot be vetoed here.
* **Lowering-time inlining** (``inline_veto``): pointwise chains are merged while FX nodes are lowered
  to IR (an unrealized ``Pointwise`` is inlined into every consumer), before the scheduler exists.
  ``inline_veto(fn)`` wraps ``GraphLowering.run_node``; after a node is lowered, ``fn(fx_node, value)``
  is asked, in graph order, and ``True`` realizes the value into its own buffer, so that consumers load
  it instead of inlining its computation. A realized buffer can still be fused by the scheduler; to get
  one kernel per op, combine with a fusion veto.

Both are context managers, nest freely (every active callback is consulted; any ``True`` vetoes) and
restore exactly what they replaced. Neither is visible to Inductor's FX graph cache: enter them inside
``fusecheck.toggles.toggled`` / ``salted`` (which salts the cache key), or a cached graph compiled without
the veto will be served.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, ContextManager, Iterator

import torch

from .compat import require_attr, require_own

FusionVeto = Callable[[Any, Any, str], bool]
InlineVeto = Callable[[torch.fx.Node, Any], bool]

_INLINE_VETOES: list[InlineVeto] = []


def fusion_kind(node1: Any, node2: Any) -> str:
    """``"vertical"`` when node2 depends on node1, else ``"horizontal"`` (same test as the scheduler)."""
    return "vertical" if node1.get_operation_names() & node2.ancestors else "horizontal"


def node_traits(node: Any) -> frozenset[str]:
    """What a scheduler node contains: subset of {reduction, template, foreach, extern, pointwise}."""
    traits = set()
    if node.is_reduction():
        traits.add("reduction")
    if node.is_template():
        traits.add("template")
    if node.is_foreach():
        traits.add("foreach")
    if getattr(node, "is_extern", lambda: False)():
        traits.add("extern")
    if not traits:
        traits.add("pointwise")
    return frozenset(traits)


def _make_veto_choices_class(toggle: str) -> type:
    base = require_attr("torch._inductor.choices", "InductorChoices", toggle)
    require_attr("torch._inductor.choices", "InductorChoices.can_fuse", toggle)

    class VetoChoices(base):  # type: ignore[misc, valid-type]
        """Delegates every heuristic to the handler it wraps; ``can_fuse`` first asks the veto."""

        def __init__(self, inner: Any, veto: FusionVeto) -> None:
            self._inner = inner
            self._veto = veto

        def can_fuse(self, scheduler: Any, node1: Any, node2: Any, shared_data_score: int) -> bool:
            # Inductor's own heuristics first: the veto only sees fusions Inductor would consider.
            if not self._inner.can_fuse(scheduler, node1, node2, shared_data_score):
                return False
            return not self._veto(node1, node2, fusion_kind(node1, node2))

    def _delegate(name: str) -> Callable[..., Any]:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return getattr(self._inner, name)(*args, **kwargs)

        method.__name__ = name
        return method

    for name, value in vars(base).items():
        if name.startswith("__") or name == "can_fuse":
            continue
        if callable(value) or isinstance(value, (staticmethod, classmethod)):
            setattr(VetoChoices, name, _delegate(name))
    return VetoChoices


@functools.lru_cache(maxsize=None)
def _veto_choices_class() -> type:
    return _make_veto_choices_class("fusion_veto")


def fusion_veto(fn: FusionVeto, *, toggle: str = "fusion_veto") -> ContextManager[None]:
    """Veto scheduler fusions for compiles in this thread: ``fn(node1, node2, kind) -> True`` forbids.

    Checks the installed torch immediately (ToggleUnsupported), installs on ``__enter__``.
    """
    virtualized = require_attr("torch._inductor.virtualized", "V", toggle)
    require_attr("torch._inductor.virtualized", "V.set_choices_handler", toggle)
    require_attr("torch._inductor.choices", "InductorChoices.can_fuse", toggle)
    cls = _veto_choices_class()
    return _fusion_veto(virtualized, cls, fn)


@contextlib.contextmanager
def _fusion_veto(virtualized: Any, cls: type, fn: FusionVeto) -> Iterator[None]:
    inner = virtualized.choices
    with virtualized.set_choices_handler(cls(inner, fn)):
        yield


def _realize(value: Any) -> None:
    from torch._inductor import ir

    if isinstance(value, ir.TensorBox):
        value.realize()
    elif isinstance(value, (list, tuple)):
        for v in value:
            _realize(v)


def _patched_run_node(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def run_node(self: Any, n: torch.fx.Node) -> Any:
        result = orig(self, n)
        if n.op == "call_function" and any(fn(n, result) for fn in list(_INLINE_VETOES)):
            _realize(result)
        return result

    run_node._fusecheck_orig = orig  # type: ignore[attr-defined]
    return run_node


def inline_veto(fn: InlineVeto, *, toggle: str = "inline_veto") -> ContextManager[None]:
    """Realize lowered values at lowering time: ``fn(fx_node, value) -> True`` stops their inlining.

    Checks the installed torch immediately (ToggleUnsupported), patches on ``__enter__``.
    """
    graph_cls = require_own("torch._inductor.graph", "GraphLowering", "run_node", toggle)
    for attr in ("TensorBox.realize", "StorageBox", "BaseView", "Pointwise", "Reduction"):
        require_attr("torch._inductor.ir", attr, toggle)
    return _inline_veto(graph_cls, fn)


@contextlib.contextmanager
def _inline_veto(graph_cls: type, fn: InlineVeto) -> Iterator[None]:
    installed_here = not _INLINE_VETOES
    if installed_here:
        orig = graph_cls.__dict__["run_node"]
        graph_cls.run_node = _patched_run_node(orig)
    _INLINE_VETOES.append(fn)
    try:
        yield
    finally:
        _INLINE_VETOES.remove(fn)
        if installed_here:
            graph_cls.run_node = orig


def ir_kind(value: Any) -> str | None:
    """The kind of an unrealized lowered value: "pointwise", "reduction" or None (realized/other)."""
    from torch._inductor import ir

    if not isinstance(value, ir.TensorBox):
        return None
    data = value.data
    while isinstance(data, ir.BaseView):
        data = data.data
    if isinstance(data, ir.StorageBox):
        data = data.data
    if isinstance(data, ir.Reduction):
        return "reduction"
    if isinstance(data, ir.Pointwise):
        return "pointwise"
    return None


class AllowFirst:
    """Veto callback that allows only the first ``k`` distinct decisions, in the order Inductor asks.

    A decision is keyed by ``(name1, name2, kind)``: a repeated (speculative) question gets the same
    answer. ``decisions`` lists every key in first-asked order with the answer given, so a bisector can
    report which decision index it stopped at. Works for ``fusion_veto`` (nodes are scheduler nodes)
    and ``inline_veto`` (``AllowFirst(k, inline=True)``: the k first lowered values stay inlinable,
    the rest are realized).
    """

    def __init__(self, k: int, *, inline: bool = False, eligible: Callable[..., bool] | None = None) -> None:
        self.k = k
        self.inline = inline
        self.eligible = eligible
        self.decisions: list[tuple[tuple[str, ...], bool]] = []
        self._answers: dict[tuple[str, ...], bool] = {}

    def _key(self, a: Any, b: Any, kind: Any) -> tuple[str, ...]:
        if self.inline:
            return (a.name,)
        return (a.get_name(), b.get_name(), kind)

    def __call__(self, a: Any, b: Any, kind: Any = None) -> bool:
        if self.eligible is not None and not self.eligible(a, b, kind):
            return False
        key = self._key(a, b, kind)
        if key not in self._answers:
            allowed = sum(1 for _, ok in self.decisions if ok) < self.k
            self._answers[key] = not allowed
            self.decisions.append((key, allowed))
        return self._answers[key]
