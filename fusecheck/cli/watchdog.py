"""A wall-clock bound on a whole fusecheck command, so a hung compile or kernel never hangs a CI job; and a
deadline after Ctrl-C, so an interrupt always ends the command.

A daemon thread, not SIGALRM: a signal handler runs only when the main thread returns to Python, so a hang
inside native code (waiting on a compiler subprocess, a device synchronize) would not be bounded. On expiry
it says which phase the run was in, stops multiprocessing children, and exits with code 3 (no verdict).
Ctrl-C raises KeyboardInterrupt as usual; code that swallows it (a library's `except BaseException`) or a
clean-up that hangs would leave the command running, so the first Ctrl-C also arms a deadline: still running
INTERRUPT_GRACE_S later, it ends the same way with 130 (seen: on a loaded machine, a check interrupted while
it hung was still running 60 s later).
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
from typing import Callable, Iterator

EXIT_TIMEOUT = 3
EXIT_INTERRUPTED = 130
GRACE_ENV = "FUSECHECK_INTERRUPT_GRACE_S"
INTERRUPT_GRACE_S = 20.0
_phase = "starting"
_on_expire: list[Callable[[str, int], None]] = []
_listeners: list[Callable[[str], None]] = []  # progress displays: told each new phase


@contextlib.contextmanager
def on_timeout(fn: Callable[[str, int], None]) -> Iterator[None]:
    """Call `fn(message, exit_code)` if the time limit or an interrupt's deadline ends the process inside this
    block (to write error reports)."""
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
        _end(f"`fusecheck {self.command}` timed out after {self.seconds:g} s while {_phase}; no verdict "
             "(raise --time-limit if the target is just slow)", EXIT_TIMEOUT)


def _end(message: str, code: int) -> None:
    """Say why, leave the error reports, stop the children, and end the process now with `code`."""
    print(f"fusecheck: error: {message}", file=sys.stderr, flush=True)
    for fn in list(_on_expire):
        try:
            fn(message, code)
        except Exception as exc:  # the exit must happen whatever a report writer does
            print(f"fusecheck: could not write the error report: {exc}", file=sys.stderr, flush=True)
    for child in multiprocessing.active_children():
        child.terminate()
    os._exit(code)


@contextlib.contextmanager
def interrupt_deadline(command: str) -> Iterator[None]:
    """Ctrl-C inside this block raises KeyboardInterrupt as usual and arms a deadline: if the block has not
    been left INTERRUPT_GRACE_S (`FUSECHECK_INTERRUPT_GRACE_S`) later, the process ends with 130."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    left, armed = threading.Event(), []
    try:
        grace = float(os.environ.get(GRACE_ENV, "") or INTERRUPT_GRACE_S)
    except ValueError:  # not a number: the default, as for any other unreadable setting
        grace = INTERRUPT_GRACE_S

    def deadline() -> None:
        if not left.wait(grace):
            _end(f"interrupted: `fusecheck {command}` was still running {grace:g} s after Ctrl-C (while {_phase}); "
                 "stopped, no verdict", EXIT_INTERRUPTED)

    def handler(signum, frame):
        if not armed:
            armed.append(threading.Thread(target=deadline, name="fusecheck-interrupt", daemon=True))
            armed[0].start()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        left.set()
        if signal.getsignal(signal.SIGINT) is handler:
            signal.signal(signal.SIGINT, previous)
