"""Pass gate: each graph pass Inductor runs through GraphTransformObserver (built-in passes and the
`*_custom_pre_pass` / `*_custom_post_pass` slots), named by the pass function, not just the slot."""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

from fusecheck.bisect.gates.base import DecisionLog, GateUnavailable

# fusecheck's own cache salt rides in a custom-pass slot; it changes nothing and is never a decision.
_INFRA_MODULES = ("fusecheck.passes",)


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


def _is_infra(pass_fn: Any) -> bool:
    return pass_label(pass_fn).startswith(_INFRA_MODULES) and not getattr(pass_fn, "_inners", None)


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


@contextlib.contextmanager
def _patched(gto: type, log: DecisionLog) -> Iterator[None]:
    saved = {a: gto.__dict__[a] for a in ("apply_gm_pass", "apply_graph_pass")}

    def make(orig: Any) -> Any:
        @functools.wraps(orig)
        def apply(self: Any, pass_fn: Any) -> Any:
            if _is_infra(pass_fn):
                return orig(self, pass_fn)
            label = pass_label(pass_fn)
            slot = getattr(self, "passname", "?")
            before = {n.name for n in _graph_of(self.gm).nodes}
            name = label if label.endswith(slot) else f"{slot}: {label}"
            if not log.decide("pass", f"{slot}:{label}", name, [], [slot]):
                return None
            d = log.decisions["pass"][-1]
            out = orig(self, pass_fn)
            after = {n.name for n in _graph_of(self.gm).nodes}
            d.fx_nodes = sorted(before - after) + sorted(after - before)
            return out
        return apply

    for attr, orig in saved.items():
        setattr(gto, attr, make(orig))
    try:
        yield
    finally:
        for attr, orig in saved.items():
            setattr(gto, attr, orig)
