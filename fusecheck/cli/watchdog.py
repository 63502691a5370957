"""A wall-clock bound on a whole fusecheck command, so a hung compile or kernel never hangs a CI job.

A daemon thread, not SIGALRM: a signal handler runs only when the main thread returns to Python, so a hang
inside native code (waiting on a compiler subprocess, a device synchronize) would not be bounded. On expiry
it says which phase the run was in, stops multiprocessing children, and exits with code 3 (no verdict).
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
from typing import Callable, Iterator

EXIT_TIMEOUT = 3
_phase = "starting"
_on_expire: list[Callable[[str], None]] = []
_listeners: list[Callable[[str], None]] = []  # progress displays: told each new phase


@contextlib.contextmanager
def on_timeout(fn: Callable[[str], None]) -> Iterator[None]:
    """Call `fn(message)` if the time limit ends the process inside this block (to write error reports)."""
    _on_expire.append(fn)
    try:
        yield
    finally:
        _on_expire.remove(fn)


def phase(name: str) -> None:
    """Record what the run is doing now, for the timeout message and any progress display listening."""
    global _phase
    _phase = name
    for fn in list(_listeners):
        fn(name)


@contextlib.contextmanager
def listening(fn: Callable[[str], None]) -> Iterator[None]:
    """Call `fn(phase)` on every `phase()` inside this block (progress on stderr hangs off this)."""
    _listeners.append(fn)
    try:
        yield
    finally:
        _listeners.remove(fn)


class Watchdog:
    def __init__(self, seconds: float | None, command: str):
        self.seconds, self.command = seconds, command
        self._done = threading.Event()

    def __enter__(self) -> "Watchdog":
        if self.seconds and 0 < self.seconds < 1e8:  # inf (or centuries) = no limit
            threading.Thread(target=self._watch, name="fusecheck-watchdog", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(self.seconds):
            return
        message = (f"`fusecheck {self.command}` timed out after {self.seconds:g} s while {_phase}; no verdict "
                   "(raise --time-limit if the target is just slow)")
        print(f"fusecheck: error: {message}", file=sys.stderr, flush=True)
        for fn in list(_on_expire):
            try:
                fn(message)
            except Exception as exc:  # the exit must happen whatever a report writer does
                print(f"fusecheck: could not write the error report: {exc}", file=sys.stderr, flush=True)
        for child in multiprocessing.active_children():
            child.terminate()
        os._exit(EXIT_TIMEOUT)
