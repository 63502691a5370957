"""`fusecheck dist`'s arguments, without torch: `fusecheck dist -h` (and `python -m fusecheck.distributed -h`)
answer at once; `run` imports the checker (fusecheck/distributed/cli.py) only when a check runs, and the
checker imports nothing from here (`python -m fusecheck.distributed` is fusecheck/distributed/entry.py)."""
from __future__ import annotations

import argparse

from fusecheck.cli.main import seed

from fusecheck.distributed.options import DEFAULT_REPEAT, DTYPES, LAYERS  # noqa: F401  (LAYERS: tests)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("targets", nargs="+", metavar="SPEC",
                        help="path/to/kernel.py:SpecClass (a fusecheck.distributed.DistSpec subclass), a .py file "
                             "(every spec in it) or a folder (every spec in its *.py files)")
    parser.add_argument("--world-size", type=int, default=2, help="ranks to start (ignored under torchrun) "
                        "(default: %(default)s)")
    parser.add_argument("--group", default="auto", choices=["auto", "sub", "world"],
                        help="the process group the kernel runs on: sub = global ranks 1..N of N+1 processes (rank 0 "
                             "only waits), so a kernel that mixes its group rank with its global rank fails; world = "
                             "the default group; auto = sub on gloo, world where the extra rank would need a device "
                             "(default: %(default)s)")
    parser.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl", "hccl"],
                        help="auto: hccl on NPU, nccl on CUDA, else gloo (default: %(default)s)")
    parser.add_argument("--dtype", default="fp32", choices=sorted(DTYPES), help="(default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=DEFAULT_REPEAT,
                        help="runs per shape: layer 1 again with the same tags, layers 2 and 3 with fresh inputs; "
                             "a race varies between runs, a layout bug does not (default: %(default)s)")
    parser.add_argument("--stress", action="store_true",
                        help="add a run to every repeat in which one random straggler rank's communication calls "
                             "are delayed (placement, magnitude or no delay drawn per call)")
    parser.add_argument("--max-delay-ms", type=float, default=20.0,
                        help="largest stress delay (default: %(default)s)")
    parser.add_argument("--seed", type=seed, default=0, help="0..2^63-1 (default: %(default)s)")
    parser.add_argument("--shape", action="append", default=[], metavar="k=v,...",
                        help="shape dict for make_inputs, e.g. m=7,k=16,n=8 (repeatable; default: the spec's)")
    parser.add_argument("--layers", default=",".join(LAYERS), help="subset of comm,compute,whole "
                        "(default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds a rank may stay silent in one phase before it is reported as HANG "
                             "(default: %(default)s)")
    parser.add_argument("--start-method", choices=["fork", "forkserver", "spawn"],
                        help="how ranks are started (default: fork for gloo, spawn for nccl/hccl)")
    parser.add_argument("--spec-arg", action="append", default=[], metavar="k=v",
                        help="constructor argument of the spec(s), typed by the constructor's annotations "
                             "(int/float/bool/str) or else read as JSON; one per flag, so values may hold commas")
    parser.add_argument("--policy", help="policy file (TOML/JSON); default: [tool.fusecheck] or built-in")
    parser.add_argument("--json", help="write the full report (per-layer, per-rank verdicts) here")
    parser.add_argument("--html", help="write a self-contained HTML page: the layer x rank grid")


def run(args: argparse.Namespace) -> int:
    from fusecheck.distributed.cli import run as run_dist
    return run_dist(args)
