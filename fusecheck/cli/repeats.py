"""--repeat / --rate-bound: the arguments and the number of runs they ask for, shared by `check` and `op`
(and the fixture). No torch: `-h` of either command answers at once."""
from __future__ import annotations

import argparse

from fusecheck.rates import runs_for_bound


MAX_RUNS_FOR_BOUND = 10_000_000   # a bound that needs more clean runs than this is not one a check can reach


def rate(text: str) -> float:
    try:
        value = float(text)
        runs = runs_for_bound(value)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r}: a failure rate strictly between 0 and 1 (0.05 = 5%)") from None
    if runs > MAX_RUNS_FOR_BOUND:
        raise argparse.ArgumentTypeError(f"{text!r}: bounding a failure rate that low needs {runs:.3g} clean runs; "
                                         f"the most a check may ask is {MAX_RUNS_FOR_BOUND:,}")
    return value


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of runs >= 1")
    return value


def add_repeat_arguments(p: argparse.ArgumentParser, default: int) -> None:
    """--repeat / --rate-bound, shared by `op` and `check` (and later `dist`)."""
    p.add_argument("--repeat", type=positive, default=None, metavar="N",
                   help=f"runs per dtype and shape, each judged, with fresh inputs (seed + i); the report gives the "
                        f"failure rate with a Wilson 95%% bound (default: {default})")
    p.add_argument("--rate-bound", type=rate, default=None, metavar="P",
                   help="run as often as a clean pass needs to bound the failure rate below P (0.05: 73 runs); "
                        "with --repeat the larger count is used")


def repeats(args: argparse.Namespace, default: int) -> tuple[int, str | None]:
    """The runs to make and a note on how they were chosen (None when --repeat alone chose them)."""
    given = args.repeat
    if args.rate_bound is None:
        return (given or default), None
    needed = runs_for_bound(args.rate_bound)
    n = max(needed, given or 0)
    return n, (f"--rate-bound {args.rate_bound:g}: {n} runs ({needed} clean runs put the Wilson 95% upper bound "
               f"below {args.rate_bound:g})")
