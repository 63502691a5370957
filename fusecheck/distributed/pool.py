"""A pool of rank processes started once and reused across checks, with a parent-kept deadline.

The parent never blocks on a rank: it waits on every rank's pipe and process sentinel at once. Each rank
reports when it enters a phase; a rank silent in one phase for longer than `timeout_s + grace_s` is
named as HANG (the process-group timeout, equal to `timeout_s`, makes the ranks waiting for it raise
first, so the silent one stands out; rank 0's monitored barrier names it too). A rank that raises or dies
is named as CRASH with its traceback or signal. On HANG or CRASH every rank is killed and joined; the next
check starts a fresh pool (a fork costs ~0.1 s).
"""
from __future__ import annotations

import collections
import multiprocessing as mp
import os
import re
import signal
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from fusecheck.distributed.backends import BACKENDS
from fusecheck.distributed.worker import rank_main

# Exceptions a rank raises because *another* rank failed: not the culprit. Only errors raised by the
# communication backend (`worker.backend_raised`) are matched; a kernel's own exception never is.
SECONDARY = re.compile(r"timed out|timeout|connection closed|connection reset|broken pipe|"
                       r"failed to pass monitoredbarrier|ECONNRESET|peer|socket", re.I)
MONITORED = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")
CRASH_SETTLE_S = 0.3
PHASE_LIMIT_FACTOR = 4   # a phase may last this many deadlines (timeout + grace) even while it makes dist calls


def is_secondary(error: dict) -> bool:
    """A rank's error (as `worker._describe` gives it) that is a side effect of another rank's failure."""
    return bool(error.get("backend_error")) and bool(SECONDARY.search(error.get("message", "")))


def odd_ones_out(ranks: dict) -> list[int]:
    """Every rank timed out: name the rank(s) whose (phase, dist calls) differ from the others'. When a strict
    majority agrees, the rest are named (a rank that issued a call its peers never matched, or skipped one);
    with no majority but one phase, the ranks with the fewest calls. Empty when nothing tells them apart."""
    state = {r: (s.phase, s.calls) for r, s in ranks.items()}
    counts = collections.Counter(state.values())
    if len(counts) < 2:
        return []
    common, n = counts.most_common(1)[0]
    if n * 2 > len(state):
        return sorted(r for r, key in state.items() if key != common)
    if len({phase for phase, _ in state.values()}) == 1:
        fewest = min(calls for _, calls in state.values())
        return sorted(r for r, (_, calls) in state.items() if calls == fewest)
    return []


@dataclass
class Outcome:
    status: str                                       # "ok", "HANG" or "CRASH"
    ranks: list[int] = field(default_factory=list)    # the culprits
    detail: str = ""
    reason: str = ""                                  # what the culprits did, where known ("skipped ...")
    phases: dict[int, str] = field(default_factory=dict)
    errors: dict[int, dict] = field(default_factory=dict)
    results: list[dict] = field(default_factory=list)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return {"status": self.status, "ranks": self.ranks, "detail": self.detail, "reason": self.reason,
                "phases": {str(k): v for k, v in self.phases.items()},
                "errors": {str(k): v for k, v in self.errors.items()}, "elapsed_s": self.elapsed_s}


@dataclass
class _Rank:
    phase: str = "start"
    calls: int = 0          # dist calls the kernel made in this phase
    since: float = 0.0      # last message (any kind): silence past the deadline is a HANG
    phase_since: float = 0.0   # last "enter": a phase longer than the phase limit is a livelock, calls or not
    finished: bool = False
    error: dict | None = None
    history: dict[str, int] = field(default_factory=dict)   # phases left -> dist calls made in them


def skipped_collective(ranks: dict, current: bool = False) -> tuple[list[int], str]:
    """Ranks that left a phase after fewer dist calls than a peer made in it: they skipped a collective their
    peers entered (the peers then abort on gloo's mismatch or time out, and look like the culprit). Only the
    first phase where the counts differ is judged: later differences are its consequences. With `current` (a
    rank aborted on a mismatch), fewer calls in the phase a rank is still in count too: the skipper went on to
    a collective outside the kernel (the golden's). When most ranks would be named, the others issued a
    collective their peers never matched: they are named."""
    def made(r: int, phase: str, final: bool) -> int | None:
        s = ranks[r]
        if phase in s.history:
            return s.history[phase]
        return s.calls if s.phase == phase and (current or not final) else None
    order = max((list(s.history) + [s.phase] for s in ranks.values()), key=len)
    for phase in order:
        named, evidence = set(), ""
        for r in ranks:
            calls = made(r, phase, final=True)
            if calls is None:
                continue
            more = [(q, made(q, phase, False)) for q in ranks if q != r and (made(q, phase, False) or 0) > calls]
            if more:
                named.add(r)
                evidence = evidence or (f"rank {r} made {calls} dist call(s) in phase {phase!r} where rank "
                                        f"{more[0][0]} made {more[0][1]}")
        if named:
            if 2 * len(named) > len(ranks):
                return sorted(set(ranks) - named), "issued a collective its peers never matched; " + evidence
            return sorted(named), "skipped a collective its peers entered; " + evidence
    return [], ""


class RankPool:
    """`world` rank processes joined in one process group; `run(task)` returns an `Outcome`."""

    def __init__(self, world: int, backend: str = "gloo", timeout_s: float = 30.0, grace_s: float | None = None,
                 start_method: str | None = None, phase_limit_s: float | None = None, outside: int = 0):
        self.world, self.backend, self.timeout_s = world, BACKENDS[backend], timeout_s
        # processes outside the kernel's group (worker.rank_main): its group ranks are then not global ranks
        self.outside = outside
        self.outsiders: list = []     # (process, pipe) of each, started first: global ranks 0..outside-1
        self.start_method = start_method or self.backend.start_method
        self.grace_s = grace_s if grace_s is not None else max(2.0, 0.25 * timeout_s)
        # a rank that keeps making dist calls (a livelock: polling a flag that is never set with a collective)
        # is never silent; no phase (one layer of one repeat of one shape) may last longer than this
        self.phase_limit_s = phase_limit_s if phase_limit_s is not None else PHASE_LIMIT_FACTOR * (
            timeout_s + self.grace_s)
        # gloo: waiting peers raise at the timeout and are told apart from the culprit. NCCL's watchdog instead
        # aborts a waiting rank's process: keep it later than the parent's deadline, so the culprit is named.
        self.pg_timeout_s = timeout_s if self.backend.timeout_raises else timeout_s + self.grace_s + 60
        self.procs: list = []
        self.conns: list = []
        self._init_file = None

    # ---- lifecycle ---------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return bool(self.procs) and all(p.is_alive() for p in self.procs + [p for p, _ in self.outsiders])

    def start(self) -> Outcome:
        self.close()
        ctx = mp.get_context(self.start_method)
        fd, self._init_file = tempfile.mkstemp(prefix="fusecheck_dist_")
        os.close(fd)
        os.unlink(self._init_file)  # the file store creates it
        for g in range(self.outside + self.world):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=rank_main, daemon=True, name=f"fusecheck-rank{g - self.outside}",
                               args=(g, self.world, self.backend.name, self._init_file, self.pg_timeout_s, child,
                                     self.outside))
            proc.start()
            child.close()
            if g < self.outside:
                self.outsiders.append((proc, parent))
            else:
                self.procs.append(proc)
                self.conns.append(parent)
        outcome = self._collect(expect="ready")
        if outcome.status == "ok":
            outcome = self._outsiders_ready()
        if outcome.status != "ok":
            self.close(graceful=False)
        return outcome

    def _outsiders_ready(self) -> Outcome:
        """The processes outside the kernel's group joined it too (the group's ranks could not start without
        them: new_group waits for every process), so their answer is already there or on its way."""
        for g, (proc, conn) in enumerate(self.outsiders):
            if not conn.poll(self.timeout_s + self.grace_s):
                return Outcome("HANG", [], f"the process outside the kernel's group (global rank {g}) did not "
                               "answer after the group's ranks started")
            kind, payload = conn.recv()
            if kind != "ready":
                return Outcome("CRASH", [], f"the process outside the kernel's group (global rank {g}) failed to "
                               f"start: {payload.get('type')}: {payload.get('message')}",
                               errors={-1 - g: payload})
        return Outcome("ok")

    def close(self, graceful: bool = True) -> None:
        """Stop every rank (politely when idle, else SIGKILL), join all, remove the store file."""
        procs = self.procs + [p for p, _ in self.outsiders]
        conns = self.conns + [c for _, c in self.outsiders]
        for conn in conns if graceful else ():
            try:
                conn.send(("stop", None))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + (1.0 if graceful else 0.0)
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
        for conn in conns:
            conn.close()
        self.procs, self.conns, self.outsiders = [], [], []
        if self._init_file and os.path.exists(self._init_file):
            os.unlink(self._init_file)
        self._init_file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    # ---- running -----------------------------------------------------------------------------------
    def run(self, task) -> Outcome:
        """Run one check on every rank; on HANG or CRASH the pool is torn down before returning."""
        if not self.alive:
            started = self.start()
            if started.status != "ok":
                return started
        for conn in self.conns:
            conn.send(("task", task))
        outcome = self._collect(expect="done")
        if outcome.status != "ok":
            self.close(graceful=False)
        return outcome

    def _collect(self, expect: str) -> Outcome:
        t0 = time.monotonic()
        ranks = {r: _Rank(since=t0, phase_since=t0) for r in range(self.world)}
        results: list[dict] = []
        first_crash = None
        while True:
            pending = [r for r, s in ranks.items() if not s.finished]
            if not pending:
                break
            handles = {self.conns[r]: r for r in pending}
            handles.update({self.procs[r].sentinel: r for r in pending})
            for ready in wait(list(handles), timeout=0.05):
                r = handles[ready]
                if ranks[r].finished:
                    continue
                if ready is self.procs[r].sentinel and not self.conns[r].poll():
                    self._died(ranks[r], r)
                    continue
                self._receive(ranks[r], r, expect, results)
            now = time.monotonic()
            primary = [r for r, s in ranks.items() if s.error and not s.error.get("secondary")]
            if primary and first_crash is None:
                first_crash = now
            if first_crash is not None and (now - first_crash > CRASH_SETTLE_S or all(s.finished for s in ranks.values())):
                return self._crash(ranks, primary, results, t0)
            stuck = [r for r, s in ranks.items() if not s.finished and now - s.since > self.timeout_s + self.grace_s]
            if stuck:
                return self._hang(ranks, results, t0)
            endless = [r for r, s in ranks.items() if not s.finished and now - s.phase_since > self.phase_limit_s]
            if endless:
                return self._livelock(ranks, endless, results, t0)
        errors = {r: s.error for r, s in ranks.items() if s.error}
        if errors:  # every rank finished, some with secondary errors only: they timed out waiting for each other
            return self._hang(ranks, results, t0)
        return Outcome("ok", results=results, elapsed_s=time.monotonic() - t0)

    def _receive(self, state: _Rank, r: int, expect: str, results: list) -> None:
        try:
            kind, payload = self.conns[r].recv()
        except (EOFError, OSError):
            self._died(state, r)
            return
        state.since = time.monotonic()
        if kind == "enter":
            if state.phase != "start":
                state.history[state.phase] = state.calls
            state.phase, state.calls, state.phase_since = payload, 0, state.since
        elif kind == "call":
            state.calls += 1
        elif kind == "result":
            results.append(payload)
        elif kind == expect:
            state.finished = True
        elif kind == "error":
            payload["secondary"] = is_secondary(payload)
            state.error, state.finished = payload, True

    def _died(self, state: _Rank, r: int) -> None:
        proc = self.procs[r]
        proc.join(1)
        code = proc.exitcode
        how = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with code {code}")
        state.error = {"type": "ProcessDied", "message": f"rank {r} process {how} without a Python traceback",
                       "traceback": "", "secondary": False}
        state.finished = True

    def _crash(self, ranks: dict, primary: list[int], results: list, t0: float) -> Outcome:
        first = ranks[primary[0]].error
        detail = f"rank {primary[0]}: {first['type']}: {first['message']}".strip()
        culprits, reason = sorted(primary), ""
        aborted = all(ranks[r].error.get("type") == "ProcessDied" and "SIGABRT" in ranks[r].error.get("message", "")
                      or ranks[r].error.get("backend_error") for r in primary)
        skipped, evidence = skipped_collective(ranks, current=aborted)
        if skipped and not set(skipped) & set(primary):
            # the crashed rank is the victim: it aborted on a collective that a peer never issued
            culprits, reason = skipped, evidence.split("; ", 1)[0]
            detail = (f"rank(s) {', '.join(map(str, skipped))} {evidence}; then {detail} (a victim of the "
                      "mismatch: gloo aborts the rank left waiting in the unmatched collective)")
        elif skipped and set(skipped) == set(primary):
            # the skipper itself aborted: it went on to the next collective, which met its peers' unmatched one
            reason = evidence.split("; ", 1)[0]
            detail = (f"rank(s) {', '.join(map(str, skipped))} {evidence}; then {detail} (its next collective "
                      "met the one its peers were still in)")
        return Outcome("CRASH", culprits, detail, reason, {r: s.phase for r, s in ranks.items()},
                       {r: s.error for r, s in ranks.items() if s.error}, results, time.monotonic() - t0)

    def _livelock(self, ranks: dict, endless: list[int], results: list, t0: float) -> Outcome:
        # every unfinished rank still in the same phase loops with it (they answer each other's collectives);
        # they cross the limit a few ms apart, so name them together rather than whoever was checked first
        phases = {ranks[r].phase for r in endless}
        endless = sorted(r for r, s in ranks.items() if not s.finished and s.phase in phases)
        detail = (f"rank(s) {', '.join(map(str, endless))} kept running one phase for more than "
                  f"{self.phase_limit_s:.1f} s (the phase limit) while still answering (a livelock: e.g. "
                  "polling a flag that is never set with a "
                  "collective); " + "; ".join(f"rank {r} in phase {ranks[r].phase!r} after {ranks[r].calls} dist "
                                              f"call(s)" for r in ranks))
        return Outcome("HANG", sorted(endless), detail, "", {r: s.phase for r, s in ranks.items()},
                       {r: s.error for r, s in ranks.items() if s.error}, results, time.monotonic() - t0)

    def _hang(self, ranks: dict, results: list, t0: float) -> Outcome:
        silent = [r for r, s in ranks.items() if not s.finished]
        named = set()
        for s in ranks.values():
            m = MONITORED.search((s.error or {}).get("message", ""))
            if m:
                named |= {int(x) for x in re.findall(r"\d+", m.group(1))}
        if len(silent) > 1 and len({ranks[r].phase for r in silent}) == 1:
            # peers block inside a collective the culprit never issued: fewest dist calls in the phase
            fewest = min(ranks[r].calls for r in silent)
            silent = [r for r in silent if ranks[r].calls == fewest]
        timed_out = odd_ones_out(ranks) if not silent and not named else []
        skipped, evidence = skipped_collective(ranks)
        reason = evidence.split("; ", 1)[0] if skipped and not silent else ""
        culprits = sorted(silent or (skipped if reason else []) or named or timed_out or ranks)
        if silent:
            detail = (f"rank(s) {', '.join(map(str, culprits))} stopped answering for "
                      f"{self.timeout_s + self.grace_s:.1f} s; "
                      + "; ".join(f"rank {r} in phase {ranks[r].phase!r} after {ranks[r].calls} dist call(s)"
                                  for r in culprits)
                      + "; other ranks: " + ", ".join(f"rank {r} {ranks[r].calls} call(s)"
                                                      for r in ranks if r not in culprits))
        else:
            detail = ("every rank timed out waiting in a collective (mismatched collectives or a deadlock)"
                      + (f"; rank(s) {', '.join(map(str, culprits))} differ from the others in phase or "
                         "number of dist calls" if timed_out else "")
                      + ": " + "; ".join(f"rank {r}: {ranks[r].phase!r} after {ranks[r].calls} dist call(s)"
                                         for r in ranks))
        if named:
            detail += f"; monitored barrier named rank(s) {sorted(named)}"
        if reason:
            detail = f"rank(s) {', '.join(map(str, culprits))} {evidence}; " + detail
        return Outcome("HANG", culprits, detail, reason, {r: s.phase for r, s in ranks.items()},
                       {r: s.error for r, s in ranks.items() if s.error}, results, time.monotonic() - t0)
