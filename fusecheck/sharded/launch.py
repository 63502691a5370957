"""`fusecheck check` on a sharded model: under torchrun (RANK/WORLD_SIZE/LOCAL_RANK set) every process is
one rank; `--nproc N` starts N ranks with torch's own elastic launcher (what torchrun runs) and, when a rank
fails, names it from the ranks' status files (fusecheck/sharded/ranks.py).

Hooks for `fusecheck check` (check_cli.py): `add_sharded_arguments(p)` in `add_arguments`, and at the top of
`run`: `code = sharded_run(args)` / `if code is not None: return code`.
"""
from __future__ import annotations

import argparse
import logging
import os
import pickle
import sys
import tempfile
import time

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def add_sharded_arguments(p: argparse.ArgumentParser) -> None:
    from fusecheck.cli.main import positive_int
    p.add_argument("--nproc", type=positive_int, default=None, metavar="N",
                   help="shard the model per block with FSDP2 over N processes on this host (one GPU each with "
                        "--device cuda, gloo on the host) and check it on every rank; the same as running "
                        "`torchrun --nproc-per-node N -m fusecheck check ...`")


def under_torchrun() -> bool:
    return all(k in os.environ for k in TORCHRUN_ENV)


def sharded_run(args: argparse.Namespace) -> int | None:
    """The exit code of a sharded check, or None when this is no sharded check (one process, as before)."""
    if under_torchrun():
        from fusecheck.sharded.rank import run_rank
        return run_rank(args)
    if getattr(args, "nproc", None):
        return launch(args)
    return None


def _target_file_exists(target: str | None) -> None:
    """A missing target file is one line here, not one traceback per rank (the target is imported by the
    ranks only: importing it here too would cost seconds, transformers' import for one)."""
    from pathlib import Path

    from fusecheck.case import TargetError
    where = (target or "").rpartition(":")[0]
    if target and ":" not in target:
        raise TargetError(f"{target!r}: expected FILE.py:NAME or module:NAME")
    if where.endswith(".py") and not Path(where).is_file():
        raise TargetError(f"{target!r}: file {where} not found")


def launch(args: argparse.Namespace) -> int:
    """Start `args.nproc` ranks through `torch.distributed.launcher.api.elastic_launch` (torchrun's engine,
    standalone rendezvous on this host, no restarts); each runs `python -m fusecheck.sharded.rank ARGS`."""
    import uuid

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from fusecheck.sharded.rank import refuse_unsupported
    from fusecheck.sharded.ranks import DIR_ENV, name_culprits, read_statuses
    from fusecheck.cli.watchdog import phase

    from fusecheck.report.on_error import error_reports_for
    started = time.monotonic()
    refuse_unsupported(args)
    _target_file_exists(args.target)

    with tempfile.TemporaryDirectory(prefix="fusecheck_sharded_") as folder:
        spec = os.path.join(folder, "args.pickle")
        with open(spec, "wb") as f:
            pickle.dump(argparse.Namespace(**{**vars(args), "nproc": None}), f)
        config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=args.nproc, run_id=str(uuid.uuid4()),
                              rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0,
                              monitor_interval=0.1)
        phase(f"running {args.nproc} ranks (torch elastic launcher)")
        previous = os.environ.get(DIR_ENV)
        os.environ[DIR_ENV] = folder  # inherited by the ranks
        exit_codes: dict[int, int] = {}
        agent_log = logging.getLogger("torch.distributed.elastic")
        level = agent_log.level
        if not args.verbose:  # the culprit is named below; the agent's own lines are kept for --verbose
            agent_log.setLevel(logging.CRITICAL)
        try:
            elastic_launch(config, sys.executable)("-m", "fusecheck.sharded.rank", spec)
        except ChildFailedError as exc:
            exit_codes = {r: f.exitcode for r, f in exc.failures.items()}
        finally:
            agent_log.setLevel(level)
            if previous is None:
                os.environ.pop(DIR_ENV, None)
            else:
                os.environ[DIR_ENV] = previous
        statuses = read_statuses(folder, args.nproc)
    codes = {s.get("exit_code") for s in statuses.values()}
    if not exit_codes and all(s.get("ended") and "exit_code" in s for s in statuses.values()) and len(codes) == 1:
        return codes.pop()  # a verdict: rank 0 wrote the reports
    errors = {(s.get("error") or {}).get("message") for s in statuses.values()}
    if all(s.get("error") and not s.get("secondary") for s in statuses.values()) and len(errors) == 1:
        code = 2 if all(s.get("usage") for s in statuses.values()) else 3  # rank 0 said it already
        error_reports_for(args, started)(str(errors.pop()), code)
        return code
    kind, ranks, detail = name_culprits(statuses, exit_codes)
    who = "rank" if len(ranks) == 1 else "ranks"
    message = f"{kind}: {who} {', '.join(map(str, ranks))}: {detail}"
    print(f"fusecheck: error: {message}", file=sys.stderr, flush=True)
    error_reports_for(args, started)(message, 3)  # no verdict, yet CI finds a report
    return 3
