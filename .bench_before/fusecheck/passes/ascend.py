"""Ascend adapter: maps fusecheck toggle names onto graph-autofusion flags (``AUTOFUSE_FLAGS``).

Nothing here has run on an NPU: flag construction and selection are tested; applying them needs
``torch_npu`` (guarded import) and is only checked for the clear error when it is absent.

Autofuse fusion types: elemwise (always on, cannot be switched off), reduce (off by default),
concat / slice / gather / transpose (off by default, pure data movement). Flags are ``--key=value``
items joined by ``;``, several values joined by ``,``; a pass may not be both enabled and disabled.
"""
from __future__ import annotations

import contextlib
import importlib
import os
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from .catalog import TOGGLES
from .errors import ToggleError, ToggleUnsupported

# toggle name -> autofuse pass it disables. Data-movement names exist for Ascend only (Inductor has no
# such fusion to switch off: its views and concatenations are folded into indexing).
DISABLE_PASS = {
    "fusion.reduction": "reduce",
    "fusion.concat": "concat",
    "fusion.slice": "slice",
    "fusion.gather": "gather",
    "fusion.transpose": "transpose",
}
ASCEND_ONLY = frozenset(n for n in DISABLE_PASS if n not in TOGGLES)
# toggle name -> extra flags / environment that carry the same intent on Ascend.
EXTRA_FLAGS = {"emulate_precision_casts": {"--autofuse_enhance_precision_blacklist": "all"}}
EXTRA_ENV = {"emulate_precision_casts": {"TORCHINDUCTOR_EMULATE_PRECISION_CASTS": "1"}}
NO_EQUIVALENT = {
    "fusion.pointwise": "elemwise fusion cannot be switched off in Ascend autofuse",
    "fusion.template": "autofuse has no matmul templates with epilogue/prologue fusion",
    "fusion.horizontal": "autofuse has no separate switch for horizontal fusion",
    "max_autotune": "no autofuse equivalent",
}
PASSES = ("reduce", "concat", "slice", "gather", "transpose")


@dataclass
class AscendFlags:
    enable: list[str] = field(default_factory=list)
    disable: list[str] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    unmapped: dict[str, str] = field(default_factory=dict)  # toggle -> why it has no Ascend flag

    @property
    def autofuse_flags(self) -> str:
        items = ["--enable_autofuse=true"]
        if self.enable:
            items.append("--autofuse_enable_pass=" + ",".join(self.enable))
        if self.disable:
            items.append("--autofuse_disable_pass=" + ",".join(self.disable))
        items += [f"{k}={v}" for k, v in self.extra.items()]
        return ";".join(items)

    def environment(self) -> dict[str, str]:
        return {"AUTOFUSE_FLAGS": self.autofuse_flags, **self.env}


def ascend_flags(toggles: Sequence[str], enable: Sequence[str] = ()) -> AscendFlags:
    """Select autofuse flags for ``toggles`` (fusecheck names); ``enable`` lists autofuse passes to turn on."""
    flags = AscendFlags()
    for p in enable:
        if p not in PASSES:
            raise ToggleError(f"unknown autofuse pass {p!r}; known: {', '.join(PASSES)}")
        if p not in flags.enable:
            flags.enable.append(p)
    for name in toggles:
        if name not in TOGGLES and name not in ASCEND_ONLY:
            known = sorted(set(TOGGLES) | ASCEND_ONLY)
            raise ToggleError(f"unknown toggle {name!r}; known toggles: {', '.join(known)}")
        if name in DISABLE_PASS:
            p = DISABLE_PASS[name]
            if p in flags.enable:
                raise ToggleError(f"autofuse pass {p!r} would be both enabled and disabled (toggle {name!r})")
            if p not in flags.disable:
                flags.disable.append(p)
        flags.extra.update(EXTRA_FLAGS.get(name, {}))
        flags.env.update(EXTRA_ENV.get(name, {}))
        if name not in DISABLE_PASS and name not in EXTRA_FLAGS and name not in EXTRA_ENV:
            flags.unmapped[name] = NO_EQUIVALENT.get(name, "no autofuse equivalent")
    return flags


def npu_available() -> bool:
    try:
        importlib.import_module("torch_npu")
    except Exception:  # ImportError, or a missing CANN library raised while importing
        return False
    return True


@contextlib.contextmanager
def ascend_toggled(toggles: Sequence[str], enable: Sequence[str] = ()) -> Iterator[AscendFlags]:
    """Set AUTOFUSE_FLAGS (and related env) for compiles inside; restores the environment after."""
    flags = ascend_flags(toggles, enable)
    if not npu_available():
        raise ToggleUnsupported("the Ascend adapter needs torch_npu (with the CANN toolkit), which is not importable")
    env = flags.environment()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield flags
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
