"""Ascend adapter: maps fusecheck toggle names onto graph-autofusion flags (``AUTOFUSE_FLAGS``).

Nothing here has run on an NPU: flag construction and selection are tested; applying them needs
``torch_npu`` (guarded import) and is only checked for the clear error when it is absent.

Autofuse fusion types: elemwise (always on, cannot be switched off), reduce (off by default),
concat / slice / gather / transpose (off by default, pure data movement: they promise bitwise equality,
which the matrix checks). Flags are ``--key=value`` items joined by ``;``, several values joined by ``,``;
a pass may not be both enabled and disabled.

torch_npu's Inductor has two more switches (../shared/notes/ascend.md; torch_npu/_inductor docs):
``SHUT_DOWN_FX_PASS_LIST`` (environment, ``name,name`` or ``all``: its custom FX passes not registered - read
when torch_npu._inductor is imported, so it must be set before) and
``torch_npu._inductor.config.force_fallback_kernel_id`` (``'all'`` or kernel ids ``[1, 2, 10]``: those
generated kernels run as their FX graph, i.e. eager's ops). `pattern_passes` maps onto the first.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from .catalog import TOGGLES
from .errors import ToggleError, ToggleUnsupported
from .promises import BITWISE_EAGER

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
# what enabling an autofuse pass promises beyond "not worse than eager"
PASS_PROMISES = {p: (BITWISE_EAGER,) for p in ("concat", "slice", "gather", "transpose")}
# toggle name -> torch_npu FX passes it shuts down (SHUT_DOWN_FX_PASS_LIST)
FX_PASSES_OFF = {"pattern_passes": ("all",)}
FX_PASS_ENV = "SHUT_DOWN_FX_PASS_LIST"
_PASS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class AscendFlags:
    enable: list[str] = field(default_factory=list)
    disable: list[str] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    unmapped: dict[str, str] = field(default_factory=dict)  # toggle -> why it has no Ascend flag
    fx_passes_off: list[str] = field(default_factory=list)  # SHUT_DOWN_FX_PASS_LIST (["all"] or pass names)
    fallback_kernels: str | list[int] | None = None  # torch_npu._inductor.config.force_fallback_kernel_id

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
        env = {"AUTOFUSE_FLAGS": self.autofuse_flags, **self.env}
        if self.fx_passes_off:
            env[FX_PASS_ENV] = ",".join(self.fx_passes_off)
        return env

    @property
    def promises(self) -> tuple[str, ...]:
        """What the enabled passes promise (the data-movement ones: bitwise equality with eager)."""
        return tuple(dict.fromkeys(p for name in self.enable for p in PASS_PROMISES.get(name, ())))

    def config(self) -> dict[str, object]:
        """torch_npu._inductor.config attributes to set."""
        return {} if self.fallback_kernels is None else {"force_fallback_kernel_id": self.fallback_kernels}


def fx_passes(names: Sequence[str] | str) -> list[str]:
    """SHUT_DOWN_FX_PASS_LIST's value as a list: pass names (Python identifiers, each once) or ["all"]."""
    items = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n and n.strip()]
    if "all" in items:
        if len(items) > 1:
            raise ToggleError(f"{FX_PASS_ENV}: 'all' already shuts every pass down; drop {items}")
        return ["all"]
    bad = [n for n in items if not _PASS_NAME.match(n)]
    if bad:
        raise ToggleError(f"{FX_PASS_ENV}: not a pass name: {', '.join(map(repr, bad))} (names are Python "
                          "identifiers such as fold_where, or 'all')")
    return list(dict.fromkeys(items))


def fallback_kernels(spec: str | Sequence[int] | None) -> str | list[int] | None:
    """force_fallback_kernel_id's value: 'all', or kernel ids (the N of triton_..._N), from "1,2,10" or [1, 2]."""
    if spec is None or spec == "all":
        return spec
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    try:
        ids = [int(str(i).strip()) for i in items if str(i).strip()]
    except ValueError:
        raise ToggleError(f"force_fallback_kernel_id takes 'all' or kernel ids like 1,2,10; got {spec!r}") from None
    if not ids or any(i < 0 for i in ids):
        raise ToggleError(f"force_fallback_kernel_id takes 'all' or non-negative kernel ids; got {spec!r}")
    return sorted(set(ids))


def ascend_flags(toggles: Sequence[str], enable: Sequence[str] = (), fx_passes_off: Sequence[str] | str = (),
                 fallback: str | Sequence[int] | None = None) -> AscendFlags:
    """Select autofuse flags for ``toggles`` (fusecheck names); ``enable`` lists autofuse passes to turn on;
    ``fx_passes_off`` torch_npu FX passes to shut down; ``fallback`` kernel ids (or 'all') run as FX graphs."""
    flags = AscendFlags(fallback_kernels=fallback_kernels(fallback))
    off = list(fx_passes(fx_passes_off))
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
        off += FX_PASSES_OFF.get(name, ())
        if not any(name in table for table in (DISABLE_PASS, EXTRA_FLAGS, EXTRA_ENV, FX_PASSES_OFF)):
            flags.unmapped[name] = NO_EQUIVALENT.get(name, "no autofuse equivalent")
    flags.fx_passes_off = fx_passes(["all"] if "all" in off else off)
    return flags


def npu_available() -> bool:
    try:
        importlib.import_module("torch_npu")
    except Exception:  # ImportError, or a missing CANN library raised while importing
        return False
    return True


@contextlib.contextmanager
def ascend_toggled(toggles: Sequence[str], enable: Sequence[str] = (), fx_passes_off: Sequence[str] | str = (),
                   fallback: str | Sequence[int] | None = None) -> Iterator[AscendFlags]:
    """Set AUTOFUSE_FLAGS (and related env) and torch_npu's Inductor config for compiles inside; restores both
    after. SHUT_DOWN_FX_PASS_LIST is read when torch_npu._inductor is imported: set after that, it would be a
    silent no-op, so it is refused."""
    flags = ascend_flags(toggles, enable, fx_passes_off, fallback)
    if flags.fx_passes_off and "torch_npu._inductor" in sys.modules:
        raise ToggleError(f"{FX_PASS_ENV} is read when torch_npu._inductor is imported, which has happened: "
                          "set it in the environment before the process starts")
    if not npu_available():
        raise ToggleUnsupported("the Ascend adapter needs torch_npu (with the CANN toolkit), which is not importable")
    env = flags.environment()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with contextlib.ExitStack() as stack:
            if flags.config():
                from unittest import mock
                npu_config = importlib.import_module("torch_npu._inductor.config")
                stack.enter_context(mock.patch.multiple(npu_config, **flags.config()))
            yield flags
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
