"""Pass gate: each graph pass Inductor runs through GraphTransformObserver (built-in passes and the
`*_custom_pre_pass` / `*_custom_post_pass` slots), named by the pass function, not just the slot, and by
the graph it ran on (forward, backward and graph-break graphs each run every pass).

fusecheck's cache salt (`fusecheck.toggles.salt`) occupies `post_grad_custom_pre_pass` and wraps any pass a
user put there: the wrapper itself changes nothing, so each pass it wraps is a decision of its own, named as
the user's pass, and a wrapper that wraps nothing is infrastructure, never a decision.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

from fusecheck.bisect.gates.base import DecisionLog, GateUnavailable

_INFRA_MODULES = ("fusecheck.toggles",)


def pass_label(pass_fn: Any) -> str:
    fn = pass_fn
    while isinstance(fn, functools.partial):
        fn = fn.func
    owner = getattr(fn, "__self__", None)
    if owner is not None and getattr(owner, "pass_name", None):  # PatternMatcherPass.apply and friends
        return f"{type(owner).__qualname__}({owner.pass_name})"
    if hasattr(fn, "__qualname__"):
        return f"{getattr(fn, '__module__', '')}.{fn.__qualname__}".lstrip(".")
    return f"{type(fn).__module__}.{type(fn).__qualname__}"


def wrapped(pass_fn: Any) -> list[Any] | None:
    """The passes a fusecheck wrapper runs ([] for pure infrastructure); None for anything else."""
    if not pass_label(pass_fn).startswith(_INFRA_MODULES):
        return None
    inners = getattr(pass_fn, "_inners", None)
    return list(inners()) if callable(inners) else []


def _graph_of(gm: Any) -> Any:
    return getattr(gm, "graph", gm)


def install(log: DecisionLog):
    try:
        from torch.fx.passes.graph_transform_observer import GraphTransformObserver as GTO
    except ImportError as exc:  # pragma: no cover
        raise GateUnavailable(f"pass gate: {exc}") from exc
    if not all(hasattr(GTO, a) for a in ("apply_gm_pass", "apply_graph_pass")):
        raise GateUnavailable("pass gate needs GraphTransformObserver.apply_gm_pass/apply_graph_pass")
    return _patched(GTO, log)


def _gated_run(log: DecisionLog, gto: Any, pass_fns: list[Any], target: Any) -> Any:
    """Run the allowed ones of `pass_fns` on `target` (graph or gm), one decision each."""
    slot = getattr(gto, "passname", "?")
    g = log.next_graph()
    out = None
    for pass_fn in pass_fns:
        label = pass_label(pass_fn)
        name = (label if label.endswith(slot) else f"{slot}: {label}") + f" (graph {g})"
        if not log.decide("pass", f"{slot}:{label}", name, [], [slot], ordinal=g):
            continue
        d = log.decisions["pass"][-1]
        before = {n.name: n for n in _graph_of(gto.gm).nodes}
        shape = {name: _structure(n) for name, n in before.items()}
        out = pass_fn(target)
        after = {n.name: n for n in _graph_of(gto.gm).nodes}
        gone = sorted(before.keys() - after.keys())
        changed = sorted(k for k in before.keys() & after.keys() if _structure(after[k]) != shape[k])
        d.fx_nodes = gone + changed + sorted(after.keys() - before.keys())
        d.sources = sorted({str(before[n].meta["original_aten"]) for n in gone + changed
                            if before[n].meta.get("original_aten") is not None})
    return out


def _structure(node: Any) -> tuple:
    """What a node computes (op, target, arguments by name): a pass that rewrites a node in place (new target,
    new dtype argument) changes it without renaming it, and must still count as having acted."""
    from torch.fx.node import map_arg
    return (node.op, str(node.target), str(map_arg(node.args, lambda a: a.name)),
            str(map_arg(node.kwargs, lambda a: a.name)))


@contextlib.contextmanager
def _patched(gto: type, log: DecisionLog) -> Iterator[None]:
    saved = {a: gto.__dict__[a] for a in ("apply_gm_pass", "apply_graph_pass")}

    def make(orig: Any) -> Any:
        @functools.wraps(orig)
        def apply(self: Any, pass_fn: Any) -> Any:
            inner = wrapped(pass_fn)
            if inner == []:
                return orig(self, pass_fn)
            fns = [pass_fn] if inner is None else inner
            return orig(self, lambda target: _gated_run(log, self, fns, target))
        return apply

    for attr, orig in saved.items():
        setattr(gto, attr, make(orig))
    try:
        yield
    finally:
        for attr, orig in saved.items():
            setattr(gto, attr, orig)
