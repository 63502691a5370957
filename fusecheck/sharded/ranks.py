"""What each rank is doing, kept where the launcher can read it after the rank is gone.

Under `fusecheck check --nproc N` every rank writes its phase, and how it ended, to a small JSON file in a
folder the launcher made (`FUSECHECK_SHARDED_DIR`). When torch's elastic agent stops the ranks after one
of them failed, these files say which rank failed first and why: a rank with its own error (not a timeout
or a closed connection caused by a peer) crashed; a rank that never ended while its peers timed out
waiting for it hung. Under a plain `torchrun` there is no folder and each rank says it on stderr.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from fusecheck.distributed.torchrun import Watchdog

DIR_ENV = "FUSECHECK_SHARDED_DIR"
TIMEOUT_ENV = "FUSECHECK_RANK_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 900.0


def rank_timeout_s() -> float:
    """How long a rank waits for its peers in one collective before it gives up (the process-group timeout)."""
    return float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))


class RankStatus:
    def __init__(self, rank: int, folder: str | None = None):
        self.rank = rank
        folder = folder if folder is not None else os.environ.get(DIR_ENV)
        self.path = Path(folder) / f"rank{rank}.json" if folder else None
        self.state: dict = {"rank": rank, "phase": "start", "ended": False}

    def _write(self) -> None:
        if self.path is not None:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.state))
            os.replace(tmp, self.path)  # the launcher never reads half a file

    def phase(self, name: str) -> None:
        self.state["phase"] = name
        self._write()

    def failed(self, error: dict, secondary: bool) -> None:
        self.state.update(ended=True, error={k: error[k] for k in ("type", "message")}, secondary=secondary)
        self._write()

    def hung(self, limit_s: float) -> None:
        self.state.update(ended=True, hung=limit_s)
        self._write()

    def finished(self, exit_code: int) -> None:
        self.state.update(ended=True, exit_code=exit_code)
        self._write()


class RankWatchdog(Watchdog):
    """`fusecheck dist`'s per-rank watchdog (exit 3 when a phase makes no progress for `limit_s`), which also
    leaves the verdict HANG in this rank's status for the launcher."""

    def __init__(self, rank: int, limit_s: float, status: RankStatus):
        self.status = status
        super().__init__(rank, limit_s)

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            if time.monotonic() - self.since > self.limit_s:
                self.status.phase(self.phase)
                self.status.hung(self.limit_s)
                print(f"fusecheck: HANG: rank {self.rank} made no progress for {self.limit_s:.0f} s in phase "
                      f"{self.phase!r}", file=sys.stderr, flush=True)
                os._exit(3)


def read_statuses(folder: str, world: int) -> dict[int, dict]:
    out = {}
    for r in range(world):
        try:
            out[r] = json.loads((Path(folder) / f"rank{r}.json").read_text())
        except (OSError, ValueError):
            out[r] = {"rank": r, "phase": "start (never reported)", "ended": False}
    return out


def name_culprits(statuses: dict[int, dict], exit_codes: dict[int, int]) -> tuple[str, list[int], str]:
    """(kind, ranks, detail) for a run that did not end normally on every rank: CRASH for ranks with their
    own error or killed by a signal, HANG for ranks that never ended while peers timed out on them."""
    hung = sorted(r for r, s in statuses.items() if s.get("hung"))
    if hung:
        return "HANG", hung, "; ".join(f"rank {r} made no progress for {statuses[r]['hung']:.0f} s in phase "
                                       f"{statuses[r]['phase']!r}" for r in hung)
    own = {r: s for r, s in statuses.items() if s.get("error") and not s.get("secondary")}
    if own:
        r = min(own)
        return "CRASH", sorted(own), f"rank {r} in phase {own[r]['phase']!r}: {own[r]['error']['type']}: " \
                                     f"{own[r]['error']['message']}"
    # SIGTERM is how the elastic agent stops the surviving ranks once one failed: not a death of its own
    died = {r: c for r, c in exit_codes.items() if c not in (0, -15) and not statuses[r].get("ended")}
    if died:
        r = min(died)
        how = f"signal {-died[r]}" if died[r] < 0 else f"exit code {died[r]}"
        return "CRASH", sorted(died), f"rank {r} died ({how}) in phase {statuses[r]['phase']!r}"
    silent = sorted(r for r, s in statuses.items() if not s.get("ended"))
    if silent and any(s.get("secondary") for s in statuses.values()):
        phases = ", ".join(f"rank {r} in phase {statuses[r]['phase']!r}" for r in silent)
        return "HANG", silent, f"its peers timed out waiting for it ({phases})"
    errs = sorted(r for r, s in statuses.items() if s.get("error"))
    return "CRASH", errs or silent, "; ".join(f"rank {r}: {statuses[r].get('error', {}).get('message', 'no end')}"
                                               for r in (errs or silent))
