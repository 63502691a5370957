"""`fusecheck toggles`' arguments, without torch: `fusecheck toggles -h` answers at once; `run` imports the
registry (fusecheck/toggles/cli.py), which needs torch to say what this torch supports."""
from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--how", action="store_true", help="also show how each toggle is applied to Inductor")
    p.add_argument("--json", dest="json_path", default=None, help="write the list as JSON")


def run(args: argparse.Namespace) -> int:
    from fusecheck.toggles.cli import run as run_toggles
    return run_toggles(args)
