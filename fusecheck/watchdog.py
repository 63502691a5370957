"""A wall-clock bound on a whole fusecheck command, so a hung compile or kernel never hangs a CI job.

A daemon thread, not SIGALRM: a signal handler runs only when the main thread returns to Python, so a hang
inside native code (waiting on a compiler subprocess, a device synchronize) would not be bounded. On expiry
it says which phase the run was in, stops multiprocessing children, and exits with code 3 (no verdict).
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import threading

EXIT_TIMEOUT = 3
_phase = "starting"


def phase(name: str) -> None:
    """Record what the run is doing now, for the timeout message."""
    global _phase
    _phase = name


class Watchdog:
    def __init__(self, seconds: float | None, command: str):
        self.seconds, self.command = seconds, command
        self._done = threading.Event()

    def __enter__(self) -> "Watchdog":
        if self.seconds and self.seconds > 0:
            threading.Thread(target=self._watch, name="fusecheck-watchdog", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(self.seconds):
            return
        print(f"fusecheck: error: `fusecheck {self.command}` timed out after {self.seconds:g} s while {_phase}; "
              f"no verdict (raise --time-limit if the target is just slow)", file=sys.stderr, flush=True)
        for child in multiprocessing.active_children():
            child.terminate()
        os._exit(EXIT_TIMEOUT)
