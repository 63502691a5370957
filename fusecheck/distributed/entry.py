"""`python -m fusecheck.distributed` (also the torchrun entry): `fusecheck dist`'s arguments and checker
with a wall-clock bound of its own, for runs that do not go through the `fusecheck` command."""
from __future__ import annotations

import argparse
import math
import sys

from fusecheck.cli.dist import add_arguments
from fusecheck.distributed.cli import run

DEFAULT_TIME_LIMIT_S = 3600.0


def main(argv: list[str] | None = None) -> int:
    """`python -m fusecheck.distributed` (also the torchrun entry): the same options as `fusecheck dist`."""
    from fusecheck.cli.watchdog import Watchdog
    parser = argparse.ArgumentParser(prog="python -m fusecheck.distributed", description="check fused communication + compute kernels layer by layer")
    add_arguments(parser)
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, metavar="SECONDS",
                        help="wall-clock bound on the whole command; on expiry exit 3 naming the phase "
                             "(default: %(default)s; 0 = none)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    from fusecheck.cli.report_paths import ReportWriteError
    if not 0 <= args.time_limit < math.inf:
        print(f"fusecheck dist: error: --time-limit must be a finite number >= 0, not {args.time_limit}",
              file=sys.stderr)
        return 2
    with Watchdog(args.time_limit, "dist"):
        try:
            return run(args)
        except ReportWriteError as exc:
            print(f"fusecheck dist: error: {exc}", file=sys.stderr)
            return 3
