"""Cache separation: no graph or kernel compiled under one toggle set is served under another.

Toggles that monkeypatch Inductor (choices handler, lowering hooks, decomposition table, partitioner)
are invisible to Inductor's FX graph cache and AOTAutograd cache, and to Dynamo's in-memory code cache.
Two measures, both cheap:

* **Salt** - a no-op ``CustomGraphPass`` is placed in ``config.post_grad_custom_pre_pass`` (wrapping any
  pass already there, which still runs). Inductor hashes that slot's ``uuid()`` into the FX graph cache
  key and AOTAutograd's key, so each toggle set gets its own cache entries: a repeated toggle set is a
  warm hit, a different one is a miss. The uuid also carries a hash of this package's source, so
  entries compiled by an older version of a toggle are not served. The C++/Triton kernel caches are keyed by generated source and
  stay shared - identical source is an identical kernel.
* **Dynamo reset** - whenever the effective salt changes (entering or leaving a scope that changes
  it), ``torch._dynamo.reset()`` drops compiled frames, so an already-compiled module recompiles under
  the new settings instead of reusing its old graph. This also avoids hitting Dynamo's recompile limit
  when one module is compiled under many toggle sets.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
from pathlib import Path
from typing import Any, Iterator

from .compat import require_attr, require_config

_SALT_STACK: list[tuple[str, ...]] = []
SLOT = "post_grad_custom_pre_pass"


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """Hash of this package's source: editing a toggle or hook invalidates entries salted by the old code."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def current_salt() -> tuple[str, ...]:
    """The sorted union of every active salt part (empty outside any scope)."""
    parts: set[str] = set()
    for s in _SALT_STACK:
        parts.update(s)
    return tuple(sorted(parts))


def _salt_pass_class() -> type:
    base = require_attr("torch._inductor.custom_graph_pass", "CustomGraphPass", "cache salt")

    class FusecheckSaltPass(base):  # type: ignore[misc, valid-type]
        """Runs the wrapped pass(es) unchanged; contributes the toggle set to the cache key."""

        def __init__(self, inner: Any, salt: tuple[str, ...]) -> None:
            self.inner = inner
            self.salt = salt

        def _inners(self) -> tuple[Any, ...]:
            if self.inner is None:
                return ()
            return tuple(self.inner) if isinstance(self.inner, (list, tuple)) else (self.inner,)

        def __call__(self, graph: Any) -> None:
            for p in self._inners():
                p(graph)

        def uuid(self) -> Any:
            inner = tuple(p.uuid() if hasattr(p, "uuid") else repr(p) for p in self._inners())
            return ("fusecheck-salt", code_version(), self.salt, inner)

    return FusecheckSaltPass


def _reset_dynamo() -> None:
    import torch

    torch._dynamo.reset()


@contextlib.contextmanager
def salted(parts: tuple[str, ...] | list[str]) -> Iterator[None]:
    """Add ``parts`` to the cache-key salt for compiles inside; reset Dynamo when the salt changes."""
    from torch._inductor import config

    require_config({SLOT: None}, "cache salt")
    before = current_salt()
    _SALT_STACK.append(tuple(parts))
    after = current_salt()
    try:
        if after == before:
            yield
            return
        cls = _salt_pass_class()
        inner = getattr(config, SLOT)
        if isinstance(inner, cls):  # an outer scope's salt pass: replace, do not stack
            inner = inner.inner
        _reset_dynamo()
        try:
            with config.patch({SLOT: cls(inner, after)}):
                yield
        finally:
            _reset_dynamo()
    finally:
        _SALT_STACK.pop()
