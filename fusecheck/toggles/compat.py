"""Attribute checks against the installed torch, so a toggle fails loudly instead of becoming a no-op.

Inductor internals move between releases (the GPU host runs 2.11, CI runs 2.13): every toggle looks
up what it patches through these helpers, which raise ToggleUnsupported naming the missing piece.
"""
from __future__ import annotations

import importlib
from typing import Any

import torch

from .errors import ToggleUnsupported


def _missing(what: str, toggle: str) -> ToggleUnsupported:
    return ToggleUnsupported(
        f"toggle {toggle!r} is not supported by the installed torch {torch.__version__}: "
        f"it needs {what}, which this version does not have"
    )


def require_module(path: str, toggle: str) -> Any:
    try:
        return importlib.import_module(path)
    except ImportError as e:  # pragma: no cover - depends on the torch build
        raise _missing(f"module {path}", toggle) from e


def require_attr(path: str, attr: str, toggle: str) -> Any:
    """Return ``<module path>.<attr>`` (dotted attr allowed) or raise ToggleUnsupported."""
    obj = require_module(path, toggle)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise _missing(f"{path}.{attr}", toggle)
        obj = getattr(obj, part)
    return obj


def require_config(keys: dict[str, Any], toggle: str) -> dict[str, Any]:
    """Check that every (possibly dotted) key exists in torch._inductor.config; return the patch dict."""
    from torch._inductor import config

    for key in keys:
        obj: Any = config
        for part in key.split("."):
            if not hasattr(obj, part):
                raise _missing(f"torch._inductor.config.{key}", toggle)
            obj = getattr(obj, part)
    return dict(keys)


def require_own(path: str, cls_name: str, attr: str, toggle: str) -> Any:
    """Return class ``cls_name`` from ``path`` that defines ``attr`` itself (not inherited) - it gets patched."""
    cls = require_attr(path, cls_name, toggle)
    if attr not in vars(cls):
        raise _missing(f"{path}.{cls_name}.{attr}", toggle)
    return cls
