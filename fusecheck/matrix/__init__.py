"""The toggle matrix: the core check once for the baseline and once per toggle, side by side; each row's
promises verified (promises.py, batch.py); when all toggles together are worse than each alone, the rows
that name the interacting toggles (interactions.py).

    rows.py          one row: toggles, report, promises kept or broken, movement against its reference
    report.py        the matrix's report: table, JSON, the interaction, notes
    run.py           run_matrix: which rows, in which order
    promises.py      the check behind each promise;  batch.py: batch invariance, measured
    interactions.py  leave-one-out rows, then pairs: the smallest set that is worse
    cli.py           `fusecheck matrix`

Torch-free at import, so that `fusecheck matrix -h` answers at once.
"""
from __future__ import annotations

import argparse

from .interactions import WORSE_FACTOR, Interaction, worse
from .report import MatrixReport
from .rows import ALL, BASELINE, MARK, NO_EFFECT, MatrixRow, mark_most_moved
from .run import REFERENCE_ONLY, plan, run_matrix

__all__ = ["ALL", "BASELINE", "MARK", "NO_EFFECT", "REFERENCE_ONLY", "Interaction", "MatrixReport", "MatrixRow",
           "WORSE_FACTOR", "add_arguments", "mark_most_moved", "plan", "run", "run_matrix", "worse"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .cli import add_arguments as add

    add(p)


def run(args: argparse.Namespace) -> int:
    """`fusecheck matrix` (cli.py), with this package's run_matrix looked up when it runs."""
    from .cli import run as run_cli

    return run_cli(args, run_matrix)
