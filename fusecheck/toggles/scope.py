"""``toggled(names)``: validate, apply, restore - the one way toggles are switched on."""
from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

from .catalog import TOGGLES
from .errors import ToggleError
from .salt import salted
from .toggle import Toggle

_ACTIVE: list[str] = []


def resolve(names: Sequence[str] | str) -> list[Toggle]:
    """Validate names (comma-separated string or sequence); expand implied toggles; keep order, no dups."""
    if isinstance(names, str):
        names = [n for n in names.split(",")]
    names = [n.strip() for n in names if n and n.strip()]
    unknown = [n for n in names if n not in TOGGLES]
    if unknown:
        raise ToggleError(
            f"unknown toggle{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known toggles: {', '.join(TOGGLES)} (run `fusecheck toggles` for what each does)"
        )
    out: list[Toggle] = []
    for name in names:
        for n in (*TOGGLES[name].implies, name):
            if TOGGLES[n] not in out:
                out.append(TOGGLES[n])
    return out


def active() -> tuple[str, ...]:
    """Names of toggles currently applied (outermost first), implied ones included."""
    return tuple(_ACTIVE)


@contextlib.contextmanager
def toggled(names: Sequence[str] | str) -> Iterator[None]:
    """Apply toggles to every Inductor compile inside; restore everything on exit. Nestable.

    All names are validated and every toggle is checked against the installed torch before anything
    is touched (ToggleError / ToggleUnsupported). The toggle set salts Inductor's cache key and Dynamo is
    reset when the set changes, so nothing compiled under one toggle set is reused under another.
    """
    toggles = resolve(names)
    for t in toggles:
        t.check()
    new = [t for t in toggles if t.name not in _ACTIVE]
    with contextlib.ExitStack() as stack:
        stack.enter_context(salted(tuple(f"toggle:{t.name}" for t in toggles)))
        for t in new:
            t.apply(stack)
            _ACTIVE.append(t.name)
            stack.callback(_ACTIVE.remove, t.name)
        yield
