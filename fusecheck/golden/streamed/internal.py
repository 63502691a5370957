"""fusecheck's own accesses to the originals a streamed block guards: a thread-local depth that the guard
reads (such accesses are neither answered nor watched) and the upcast sets while it copies. A module of its
own so that the guard and the upcast both import it instead of each other."""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch

_tls = threading.local()


@contextlib.contextmanager
def internal() -> Iterator[None]:
    """fusecheck's own access to originals (making their copies): not the model's, neither answered nor
    watched."""
    _tls.depth = getattr(_tls, "depth", 0) + 1
    try:
        with torch._C.DisableTorchFunctionSubclass():
            yield
    finally:
        _tls.depth -= 1


def is_internal() -> bool:
    return getattr(_tls, "depth", 0) > 0
