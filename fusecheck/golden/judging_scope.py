"""Inside the golden and outside it: the golden runs in dispatch modes (fallback, kept values, followed
choices) and, for a model that makes tensors without a dtype, with torch's default dtype set to its own.
The comparisons that judge its rows as they arrive (the end-to-end rows, the per-block replays) must see
neither: their own ops would go through the Python modes one at a time, and tensors they make would take the
golden's default dtype. One helper for every caller, so no judging path can forget one of the two."""
from __future__ import annotations

import contextlib
import contextvars

import torch
from torch.utils._python_dispatch import _disable_current_modes

# the default dtype of whoever entered the (outermost) golden default-dtype scope: the one judging restores
_CALLER_DTYPE: contextvars.ContextVar[torch.dtype | None] = contextvars.ContextVar("fusecheck_caller_dtype",
                                                                                   default=None)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    """torch's default dtype set to `dtype` for the golden; `as_caller` inside it restores the caller's."""
    before = torch.get_default_dtype()
    token = _CALLER_DTYPE.set(_CALLER_DTYPE.get() or before)
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
        _CALLER_DTYPE.reset(token)


@contextlib.contextmanager
def as_caller():
    """No dispatch mode of the golden, and the caller's default dtype, for the duration."""
    caller = _CALLER_DTYPE.get()
    before = torch.get_default_dtype()
    with _disable_current_modes():
        if caller is not None:
            torch.set_default_dtype(caller)
        try:
            yield
        finally:
            torch.set_default_dtype(before)


def outside_golden(fn):
    """`fn` (a sink judging rows while the golden runs) called as the caller would: `as_caller`."""
    def call(*args):
        with as_caller():
            return fn(*args)
    return call
