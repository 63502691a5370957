"""The adapter hook for numerics modes that upstream Inductor ships as one config key (a `numerics="strict"`
mode whose promise is bitwise equality with eager is in the making). Each mode lists the keys it may be
spelled as; the toggle applies the first one the installed torch has, and is "not supported by this torch"
when none is there (torch 2.13 has none). A new spelling upstream is one more entry in `keys`.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from .appliers import always
from .errors import ToggleUnsupported
from .promises import BITWISE_EAGER
from .toggle import Toggle


@dataclass(frozen=True)
class UpstreamMode:
    toggle: str
    keys: tuple[tuple[str, Any], ...]  # (torch._inductor.config key, value), in order of preference
    doc: str
    promises: tuple[str, ...]


def _has(config: Any, key: str) -> bool:
    obj = config
    for part in key.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def find_key(mode: UpstreamMode) -> tuple[str, Any] | None:
    """The (key, value) this torch offers for the mode, or None."""
    from torch._inductor import config

    return next(((k, v) for k, v in mode.keys if _has(config, k)), None)


def _applier(mode: UpstreamMode):
    def apply(stack: contextlib.ExitStack) -> None:
        found = find_key(mode)
        if found is None:
            spelled = " or ".join(f"torch._inductor.config.{k}={v!r}" for k, v in mode.keys)
            raise ToggleUnsupported(f"toggle {mode.toggle!r} is not supported by the installed torch "
                                    f"{torch.__version__}: it needs upstream's {spelled}, which this version "
                                    "does not have")
        from torch._inductor import config

        stack.enter_context(config.patch({found[0]: found[1]}))

    return apply


MODES = [
    UpstreamMode("numerics.strict", (("numerics", "strict"), ("numerics_mode", "strict")),
                 "upstream Inductor's strict numerics mode (every numerics-changing transformation off); "
                 "promises bitwise equality with eager", (BITWISE_EAGER,)),
]


def _how(mode: UpstreamMode) -> str:
    return "the first of " + ", ".join(f"{k}={v!r}" for k, v in mode.keys) + " that this torch has"


ENTRIES = [Toggle(m.toggle, m.doc, _how(m), _applier(m), always, promises=m.promises) for m in MODES]
