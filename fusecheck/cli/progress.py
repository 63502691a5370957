"""Progress on stderr for long commands: one status line, redrawn in place, with elapsed time.

Why not rich or tqdm: the line must follow `fusecheck.cli.watchdog.phase()` (set deep inside run_check) and stay
out of the way of the report on stdout and of compiler logs; a ticker thread and `\\r` do that in a few lines
without a new dependency. Only on a terminal: when stderr is a file or a pipe (CI logs) nothing is drawn,
so logs stay clean; `--quiet` turns it off on a terminal too.

    with Progress("check") as progress:   # phases come from watchdog.phase(...)
        progress.step(3, 9, "fusion.pointwise")   # per-row/probe/repeat counts shown in front of the phase
        progress.echo("a line that must stay")    # printed above the status line
"""
from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
from typing import Iterator, TextIO

from fusecheck.cli import watchdog

_active: list["Progress"] = []


class Progress:
    def __init__(self, command: str, *, quiet: bool = False, stream: TextIO | None = None,
                 enabled: bool | None = None, interval: float = 0.25):
        self.command, self.stream, self.interval = command, stream or sys.stderr, interval
        tty = getattr(self.stream, "isatty", lambda: False)()
        self.enabled = (tty and not quiet) if enabled is None else enabled
        self.phase, self.prefix = "starting", ""
        self.start = self.phase_start = time.monotonic()
        self._lock = threading.RLock()
        self._drawn = False  # the status line is on the terminal now
        self._at_line_start = True  # stdout's last write ended a line: the status line may be drawn
        self._stdout: TextIO | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listen = watchdog.listening(self.set)

    # -- what is shown ------------------------------------------------------------------------------
    def set(self, phase: str) -> None:
        """A new phase (also called by watchdog.phase while this display is active)."""
        with self._lock:
            self.phase, self.phase_start = phase, time.monotonic()
        self._draw()

    def step(self, index: int, total: int, label: str = "") -> None:
        """Per-row / per-probe / per-repeat count shown in front of the phase: `[3/9 fusion.pointwise]`."""
        with self._lock:
            self.prefix = f"[{index}/{total}{' ' + label if label else ''}] "
        self._draw()

    def echo(self, line: str) -> None:
        """Print a line that stays (above the status line), whether or not the status line is drawn."""
        with self._lock:
            self._erase()
            self.stream.write(line + "\n")
            self.stream.flush()
        self._draw()

    def line(self) -> str:
        now = time.monotonic()
        text = (f"fusecheck {self.command} {now - self.start:6.1f} s  {self.prefix}{self.phase}"
                f" ({now - self.phase_start:.0f} s)")
        width = max(20, shutil.get_terminal_size((120, 24)).columns - 1)
        return text if len(text) <= width else text[:width - 1] + "…"

    # -- drawing ------------------------------------------------------------------------------------
    def _draw(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            if self._at_line_start:
                self.stream.write("\r\x1b[K" + self.line())
                self.stream.flush()
                self._drawn = True

    def _erase(self) -> None:
        with self._lock:
            if self._drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self._drawn = False

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._draw()
            except (OSError, ValueError):  # the terminal went away: stop drawing, never break the run
                return

    def __enter__(self) -> "Progress":
        self._listen.__enter__()
        _active.append(self)
        if self.enabled:
            self._stdout, sys.stdout = sys.stdout, _ClearingStdout(self, sys.stdout)
            self._draw()
            self._thread = threading.Thread(target=self._tick, name="fusecheck-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        _active.remove(self)
        self._listen.__exit__(*exc)
        if self.enabled:
            if isinstance(sys.stdout, _ClearingStdout):
                sys.stdout = self._stdout
            self._erase()  # leave the terminal as it was: the report follows


class _ClearingStdout:
    """sys.stdout while a status line is drawn: a write first erases the status line, which comes back
    only once stdout has ended its line, so a report printed meanwhile is never mixed with it."""

    def __init__(self, progress: Progress, real: TextIO):
        self._progress, self._real = progress, real

    def write(self, text: str) -> int:
        with self._progress._lock:
            self._progress._erase()
            n = self._real.write(text)
            if text:
                self._progress._at_line_start = text.endswith("\n")
        return n

    def __getattr__(self, name: str):
        return getattr(self._real, name)


def echo(line: str) -> None:
    """Print a progress line on stderr above the active status line (bisect's probe lines use this)."""
    if _active:
        _active[-1].echo(line)
    else:
        print(line, file=sys.stderr, flush=True)


def step(index: int, total: int, label: str = "") -> None:
    """Set the count of the active display, if any (dist repeats, matrix rows, bisect probes)."""
    if _active:
        _active[-1].step(index, total, label)


@contextlib.contextmanager
def quiet_compiler_logs(quiet: bool = True) -> Iterator[None]:
    """Inductor prints every max-autotune benchmark table to stderr (dozens of lines per matmul on a GPU);
    a matrix or a check has its own report, so those tables are off unless --verbose."""
    module = sys.modules.get("torch._inductor.select_algorithm")
    if module is None and quiet:
        import importlib
        try:
            module = importlib.import_module("torch._inductor.select_algorithm")
        except ImportError:  # pragma: no cover - a torch without Inductor
            module = None
    if not quiet or module is None or not hasattr(module, "PRINT_AUTOTUNE"):
        yield
        return
    from unittest import mock
    with mock.patch.object(module, "PRINT_AUTOTUNE", False):
        yield
