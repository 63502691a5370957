"""The body of one pooled rank process: join the process group once, then run checks until told to stop.

Started by `RankPool` (fork on CPU: no second torch import; spawn where a device runtime forbids fork).
"""
from __future__ import annotations

import ctypes
import datetime
import os
import signal
import traceback


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the parent dies, so a killed checker never leaves ranks behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _fatal_errors_to_own_stderr() -> None:
    """A rank that gloo aborts (the victim of a skipped collective) is named by the pool; a faulthandler dump
    of it belongs on this process's stderr, not on the descriptor the parent enabled faulthandler with (pytest
    enables it on a copy of the terminal, so a planted abort printed `Fatal Python error: Aborted` into a
    passing test run, past its output capture)."""
    import faulthandler
    import sys
    if faulthandler.is_enabled():
        try:
            faulthandler.enable(file=sys.__stderr__ or sys.stderr)
        except (AttributeError, ValueError, OSError):  # no usable stderr: no dump rather than a wrong one
            faulthandler.disable()


def rank_main(global_rank: int, world: int, backend_name: str, init_file: str, timeout_s: float, conn,
              outside: int = 0) -> None:
    """One process of the pool. With `outside` > 0 the kernel runs on a process group that is not the default
    one: global ranks `outside`..`outside + world - 1`, so its group rank differs from its global rank (a kernel
    that calls dist.get_rank() where it means dist.get_rank(group) fails); the processes below `outside` only
    join the groups and wait."""
    _die_with_parent()
    _fatal_errors_to_own_stderr()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the parent, which tears ranks down
    import torch
    import torch.distributed as dist

    from fusecheck.distributed.backends import BACKENDS
    from fusecheck.distributed.task import run_check

    torch.set_num_threads(1)
    fill_uninitialized_with_nan(torch)
    backend = BACKENDS[backend_name]
    rank = global_rank - outside
    try:
        backend.prepare(global_rank)
        dist.init_process_group(backend_name, init_method=f"file://{init_file}", rank=global_rank,
                                world_size=world + outside, timeout=datetime.timedelta(seconds=timeout_s))
        # new_group is collective over every process, members or not
        group = dist.new_group(ranks=list(range(outside, outside + world))) if outside else dist.group.WORLD
        conn.send(("ready", os.getpid()))
    except BaseException as exc:
        conn.send(("error", _describe(exc)))
        return
    device = backend.device(global_rank)
    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                break
            if msg[0] == "stop":
                break
            if rank < 0:      # outside the kernel's group: never sent a check
                continue
            try:
                run_check(msg[1], rank, world, group, device, lambda kind, payload: conn.send((kind, payload)))
                conn.send(("done", None))
            except BaseException as exc:
                conn.send(("error", _describe(exc)))
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def fill_uninitialized_with_nan(torch) -> None:
    """torch.empty then returns NaN-filled memory, so a kernel that reads a slot it never wrote shows it.

    Calls the C switch directly: `torch.use_deterministic_algorithms` imports inductor (seconds per rank)."""
    torch._C._set_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True


def backend_raised(exc: BaseException) -> bool:
    """Whether `exc` can come from the communication backend: torch.distributed's own errors
    (`DistBackendError`, `DistNetworkError`, ... all `DistError`) or the plain `RuntimeError` gloo raises.
    Only these may count as a side effect of a peer's failure; anything else (a kernel's ValueError,
    TimeoutError, NotImplementedError) is this rank's own CRASH, whatever its text says."""
    try:
        import torch.distributed as dist
        dist_error = getattr(dist, "DistError", None)
    except ImportError:  # pragma: no cover
        dist_error = None
    return type(exc) is RuntimeError or (dist_error is not None and isinstance(exc, dist_error))


def _describe(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc(),
            "backend_error": backend_raised(exc)}
