"""One rank of a sharded check: join the process group, check the model on this rank, gather the verdicts to
rank 0 (which prints the report), and agree on one exit code (the worst of every rank's).

`python -m fusecheck.sharded.rank ARGS.pickle` is what `fusecheck check --nproc N` starts on every rank.
"""
from __future__ import annotations

import argparse
import os
import pickle
import sys
import time

from fusecheck.sharded.ranks import DIR_ENV, RankStatus, RankWatchdog, rank_timeout_s


# A rank's phase may hold local work with no collective in it (importing transformers, compiling a block):
# its watchdog allows that much more than the process-group timeout, so a peer waiting on it times out first.
LOCAL_WORK_S = 60.0


def run_rank(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    from fusecheck.case import load_target
    from fusecheck.check.options import CheckOptions
    from fusecheck.check.report import rows_exit_code
    from fusecheck.devices import resolve_device
    from fusecheck.errors import is_usage
    from fusecheck.distributed.pool import is_secondary
    from fusecheck.distributed.worker import _describe
    from fusecheck.policy import Policy
    from fusecheck.sharded import shard
    from fusecheck.sharded.check import check_rank
    from fusecheck.cli.watchdog import phase

    rank = int(os.environ["RANK"])
    status = RankStatus(rank)
    timeout = rank_timeout_s()
    grace = max(2.0, 0.25 * timeout)
    dog = None
    try:
        refuse_unsupported(args)
        resolve_device(args.device)
        device = shard.rank_device(args.device)
        shard.init_process_group(device.type, timeout)
        dog = RankWatchdog(rank, timeout + grace + LOCAL_WORK_S, status)

        def progress(name: str) -> None:
            dog.progress(name)
            status.phase(name)
            phase(f"rank {rank}: {name}")
        progress("load target")
        policy = Policy.load(args.policy)
        case = load_target(args.target, seed=args.seed)
        opts = CheckOptions.from_args(args, policy=policy, device=str(device))
        result, graphs = check_rank(case, opts, device, progress)
        progress("gather verdicts to rank 0")
        mine = rows_exit_code(result["rows"])
        code = torch.tensor([mine], device=device if device.type == "cuda" else "cpu")
        dist.all_reduce(code, op=dist.ReduceOp.MAX)
        gathered = [None] * dist.get_world_size() if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
        agreed = int(code.item())
        if rank == 0:
            from fusecheck.sharded.report import report_ranks
            report_ranks(case, args, policy, gathered, agreed, graphs)
        progress("shut down")
        dist.barrier()
        dist.destroy_process_group()
        dog.stop()
        status.finished(agreed)
        return 0 if os.environ.get(DIR_ENV) else agreed   # the launcher reads the verdict from the status
    except BaseException as exc:
        error = _describe(exc)
        secondary = is_secondary(error)
        status.state["usage"] = is_usage(exc)
        status.failed(error, secondary)
        if secondary:
            print(f"fusecheck: rank {rank} gave up waiting for its peers in phase {status.state['phase']!r} "
                  f"(another rank crashed or hung): {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr,
                  flush=True)
            if not os.environ.get(DIR_ENV):
                time.sleep(grace + LOCAL_WORK_S)  # plain torchrun: let the stuck rank's watchdog name it first
            raise SystemExit(3) from None  # not this rank's fault: no traceback
        raise
    finally:
        if dog is not None:
            dog.stop()


def refuse_unsupported(args: argparse.Namespace) -> None:
    """Options of `fusecheck check` the sharded check does not honour yet: a usage error, never ignored."""
    from fusecheck.case import TargetError
    for name in ("junit", "html", "baseline", "golden_device"):
        if getattr(args, name, None):
            raise TargetError(f"--{name.replace('_', '-')} is not supported by a sharded check (--nproc or "
                              "torchrun) yet")
    if getattr(args, "toggles", ""):
        raise TargetError("--toggle is not supported by a sharded check (--nproc or torchrun) yet")
    if getattr(args, "golden", "auto") == "whole":
        raise TargetError("a sharded check streams the golden block by block: --golden whole is not possible")


def main() -> int:
    """Entry of `--nproc`: the parsed `fusecheck check` arguments, then the same error handling as the CLI."""
    import types

    from fusecheck.cli.main import run_command
    from fusecheck.distributed.worker import _die_with_parent
    _die_with_parent()  # the launcher killed (time limit, Ctrl-C): no rank keeps holding a GPU
    with open(sys.argv[1], "rb") as f:
        args = pickle.load(f)
    if os.environ.get("RANK", "0") != "0":
        args.quiet = True  # one progress line, rank 0's
        if os.environ.get(DIR_ENV):  # under --nproc: one error line, rank 0's (the launcher names a lone culprit
            # from the ranks' status files); this rank's stderr is kept beside them
            sys.stderr = open(os.path.join(os.environ[DIR_ENV], f"rank{os.environ['RANK']}.stderr"), "w")
    return run_command(types.SimpleNamespace(run=run_rank), args)


if __name__ == "__main__":
    sys.exit(main())
