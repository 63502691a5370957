"""Peak memory per phase of a check, and out-of-memory errors turned into one actionable line.

On CUDA the allocator's peak (reset between phases) is exact. On the host, the resident-set high-water mark
(VmHWM) is the honest figure; Linux lets a process reset it (write 5 to /proc/self/clear_refs), so it is
per phase there too.
"""
from __future__ import annotations

import contextlib
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


_M_MMAP_THRESHOLD = -3


def return_freed_host_memory() -> None:
    """Make glibc hand large freed blocks back to the OS. By default its mmap threshold grows after the first
    large free, so later large tensors come from the heap and stay resident after they are freed: the host's
    resident set would then measure the allocator's history, not what the check holds. A fixed 1 MiB threshold
    (large tensors mmapped, unmapped on free) and a trim at each phase keep the RSS figure honest."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.lru_cache(maxsize=None)
def _glibc():
    """glibc, with the fixed mmap threshold set once; None elsewhere (nothing to do there)."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 1 << 20)
        libc.malloc_trim  # noqa: B018 - missing in a libc that is not glibc
    except (OSError, AttributeError):
        return None
    return libc


from fusecheck.errors import OutOfMemory  # noqa: E402,F401


def _status_bytes(key: str, path: Path = _STATUS) -> int | None:
    """A `KEY:   N kB` line of /proc's status or meminfo, in bytes; None where there is none."""
    try:
        m = re.search(rf"{key}:\s+(\d+) kB", path.read_text())
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def _host_peak() -> int | None:
    return _status_bytes("VmHWM")


def _host_rss() -> int | None:
    return _status_bytes("VmRSS")


def host_available() -> int | None:
    """The host's MemAvailable: what new allocations can take without swapping."""
    return _status_bytes("MemAvailable", Path("/proc/meminfo"))


def grown(entry: dict[str, int]) -> int | None:
    """What a phase added at its peak to what was held when it began (the device's when measured, else the
    host's); None where the phase's start was not recorded."""
    if "device_peak_bytes" in entry and entry.get("device_start_bytes") is not None:
        return max(0, entry["device_peak_bytes"] - entry["device_start_bytes"])
    if "host_peak_rss_bytes" in entry and "host_start_rss_bytes" in entry:
        return max(0, entry["host_peak_rss_bytes"] - entry["host_start_rss_bytes"])
    return None


def _reset_host_peak() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


@dataclass
class MemoryLog:
    """Peak bytes per phase: on the run's device, and host resident memory."""

    device: torch.device
    peaks: dict[str, dict[str, int]] = field(default_factory=dict)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        return_freed_host_memory()
        host_resettable = _reset_host_peak()
        start = torch.cuda.memory_allocated(self.device) if cuda else None
        host_start = _host_rss()
        yield
        entry: dict[str, int] = {}
        if cuda:
            torch.cuda.synchronize(self.device)
            entry["device_peak_bytes"] = torch.cuda.max_memory_allocated(self.device)
            entry["device_start_bytes"] = start
        if host_start is not None and host_resettable:
            entry["host_start_rss_bytes"] = host_start
        peak = _host_peak()
        if peak is not None:
            entry["host_peak_rss_bytes" if host_resettable else "host_peak_rss_bytes_since_start"] = peak
        self.peaks[name] = entry

    def to_dict(self) -> dict[str, dict[str, int]]:
        return dict(self.peaks)


def gib(n: float) -> str:
    return f"{n / 2 ** 30:.2f} GiB"


_HELP = {
    "golden": "--golden-device cpu runs the fp64 golden on the host; --blocks names smaller blocks",
    "eager": "a shorter sequence or smaller batch in the target",
    "compiled": "--regional compiles one block at a time; a shorter sequence or smaller batch",
    "blocks": "--no-block-verdicts skips the per-block replay",
}


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in str(exc) or "out of memory" in str(exc))


def oom_message(phase: str, exc: BaseException, device: torch.device) -> str:
    """One line: the phase, what it tried to allocate and what the device had, and what would help."""
    text = str(exc)
    need = re.search(r"(?:Tried to allocate|tried to allocate) ([\d.]+ \w+)", text)
    had = ""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        had = f"; the device had {gib(free)} free of {gib(total)}"
    needed = f"needed {need.group(1)} more" if need else "ran out of memory"
    return f"out of memory in the {phase} phase: {needed}{had}; try {_HELP.get(phase, 'a smaller target')}"
