"""`fusecheck bisect`'s arguments, without torch: `fusecheck bisect -h` answers at once; `run` imports the
bisector (fusecheck/bisect/cli.py) only when a bisection runs."""
from __future__ import annotations

import argparse

# fusecheck.bisect.gates.GATES, in its order (the coarse stage's); a test holds the two equal. Spelled out here
# because importing the gates imports torch and Inductor (seconds) and -h needs only their names.
GATE_KINDS = ("config", "pass", "pattern", "decomposition", "lowering", "inlining", "fusion")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from fusecheck.cli.check import add_common_arguments, add_scale_arguments
    add_common_arguments(p)
    add_scale_arguments(p)  # the check's golden, block and precision options: each trial is that check
    p.add_argument("--toggle", "--toggles", dest="toggles", default="", metavar="NAME[,NAME]",
                   help="bisect from a toggled build: every trial is compiled under these toggles (see `fusecheck "
                        "toggles`), e.g. the pair `fusecheck matrix --all-together` named")
    p.add_argument("--max-compiles", type=int, default=40, help="compile budget (each probe is one compile)")
    p.add_argument("--kinds", default=",".join(GATE_KINDS),
                   help=f"decision families to search, comma-separated (default: all: {','.join(GATE_KINDS)})")
    p.add_argument("--no-attribution", action="store_true", help="skip the per-kernel attribution")
    p.add_argument("--html", default=None, metavar="FILE",
                   help="write a self-contained HTML report of the bisect chain")
    p.add_argument("--repro", default=None, metavar="OUT.py",
                   help="write a standalone torch-only script reproducing the failing subgraph's error ratio")


def run(args: argparse.Namespace) -> int:
    from fusecheck.bisect.cli import run as run_bisect
    return run_bisect(args)
