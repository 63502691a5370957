"""Pattern gate: each application of a pattern-matcher entry (Inductor's own and users' PatternMatcherPass).

The pattern matcher calls `entry.apply(match, graph, node)` once per accepted match; a refused decision
skips that call, leaving the matched nodes as they were.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

from fusecheck.bisect.gates.base import DecisionLog, GateUnavailable

_CURRENT_PASS: list[str] = []


def entry_name(entry: Any) -> str:
    """The user-visible name of a pattern entry: its handler or replacement function."""
    for attr in ("handler", "replacement_fn", "search_fn"):
        fn = getattr(entry, attr, None)
        if fn is not None and hasattr(fn, "__name__"):
            return f"{getattr(fn, '__module__', '')}.{fn.__qualname__}".lstrip(".")
    return type(entry).__name__


def install(log: DecisionLog):
    try:
        from torch._inductor import pattern_matcher as pm
    except ImportError as exc:  # pragma: no cover
        raise GateUnavailable(f"pattern gate: {exc}") from exc
    classes = [c for c in (getattr(pm, n, None) for n in ("LoweringPatternEntry", "GraphPatternEntry",
                                                            "ReplacementPatternEntry")) if c is not None]
    if not classes or not hasattr(pm, "PatternMatcherPass"):
        raise GateUnavailable("pattern gate needs torch._inductor.pattern_matcher *PatternEntry classes")
    return _patched(pm, classes, log)


@contextlib.contextmanager
def _patched(pm: Any, classes: list[type], log: DecisionLog) -> Iterator[None]:
    saved = [(c, c.__dict__["apply"]) for c in classes if "apply" in c.__dict__]
    pass_apply = pm.PatternMatcherPass.apply

    @functools.wraps(pass_apply)
    def run_pass(self: Any, gm: Any) -> int:
        _CURRENT_PASS.append(getattr(self, "pass_name", None) or "pattern_matcher")
        try:
            return pass_apply(self, gm)
        finally:
            _CURRENT_PASS.pop()

    def make(orig: Any) -> Any:
        @functools.wraps(orig)
        def apply(self: Any, match: Any, graph: Any, node: Any) -> None:
            where = _CURRENT_PASS[-1] if _CURRENT_PASS else "pattern_matcher"
            name = entry_name(self)
            nodes = [n.name for n in getattr(match, "nodes", [])]
            ops = sorted({getattr(n.target, "__name__", str(n.target)) for n in getattr(match, "nodes", [])})
            if log.decide("pattern", f"{where}:{name}@{node.name}", f"{where}: {name} at {node.name}", nodes, ops):
                return orig(self, match, graph, node)
            return None
        return apply

    for cls, orig in saved:
        cls.apply = make(orig)
    pm.PatternMatcherPass.apply = run_pass
    try:
        yield
    finally:
        pm.PatternMatcherPass.apply = pass_apply
        for cls, orig in saved:
            cls.apply = orig
