"""`fusecheck dist SPEC --world-size N ...`: argument parsing and exit codes (0 pass, 1 fail, 2 bad usage or
input, 3 HANG/CRASH/tool error). The main CLI registers `add_arguments` and `run` as the `dist` subcommand."""
from __future__ import annotations

import argparse
import math
import os
import sys

from fusecheck.dist.task import LAYERS, CheckTask

DTYPES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16",
          "fp16": "float16", "float16": "float16", "half": "float16", "fp64": "float64", "float64": "float64"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="path/to/kernel.py:SpecClass (a fusecheck.dist.DistSpec subclass)")
    parser.add_argument("--world-size", type=int, default=2, help="ranks to start (ignored under torchrun)")
    parser.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl", "hccl"],
                        help="auto: hccl on NPU, nccl on CUDA, else gloo")
    parser.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    parser.add_argument("--repeat", type=int, default=1, help="runs of layers 1 and 3 with fresh inputs")
    parser.add_argument("--stress", action="store_true", help="random per-rank delays around communication")
    parser.add_argument("--max-delay-ms", type=float, default=20.0, help="largest stress delay")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shape", action="append", default=[], metavar="k=v,...",
                        help="shape dict for make_inputs, e.g. m=7,k=16,n=8 (repeatable; default: the spec's)")
    parser.add_argument("--layers", default=",".join(LAYERS), help="subset of comm,compute,whole")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds a rank may stay silent in one phase before it is reported as HANG")
    parser.add_argument("--start-method", choices=["fork", "forkserver", "spawn"],
                        help="how ranks are started (default: fork for gloo, spawn for nccl/hccl)")
    parser.add_argument("--spec-arg", action="append", default=[], metavar="k=v",
                        help="keyword argument for the spec's constructor (int/float/str)")
    parser.add_argument("--policy", help="policy file (TOML/JSON); default: [tool.fusecheck] or built-in")
    parser.add_argument("--json", help="write the full report (per-layer, per-rank verdicts) here")


def _kv(items: list[str], what: str) -> dict:
    out = {}
    for item in items:
        for part in filter(None, item.split(",")):
            key, sep, val = part.partition("=")
            if not sep:
                raise ValueError(f"{what} {part!r} must be key=value")
            out[key.strip()] = _num(val.strip())
    return out


def _num(v: str):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def build_task(args) -> CheckTask:
    from fusecheck.policy import Policy
    layers = tuple(x for x in args.layers.split(",") if x)
    unknown = set(layers) - set(LAYERS)
    if unknown:
        raise ValueError(f"unknown layer(s) {sorted(unknown)}; known: {', '.join(LAYERS)}")
    if args.repeat < 1 or args.world_size < 1 or not 0 < args.timeout < math.inf:
        raise ValueError("--repeat and --world-size must be >= 1 and --timeout a finite number > 0")
    if not 0 <= args.max_delay_ms < math.inf:
        raise ValueError(f"--max-delay-ms must be a finite number >= 0, not {args.max_delay_ms}")
    return CheckTask(spec_ref=args.spec, spec_kwargs=_kv(args.spec_arg, "--spec-arg"),
                     shapes=[_kv([s], "--shape") for s in args.shape], dtype=DTYPES[args.dtype], seed=args.seed,
                     repeat=args.repeat, stress=args.stress, max_delay_ms=args.max_delay_ms, layers=layers,
                     policy=Policy.load(args.policy), barrier_timeout_s=args.timeout)


def check_shapes(shapes: list[dict], spec) -> None:
    """--shape dicts must use exactly the shape names the spec declares (a typo or a missing name would
    otherwise surface as a KeyError on every rank) with values of the declared kinds."""
    declared = [dict(s) for s in getattr(spec, "shapes", []) or []]
    if not shapes or not declared:
        return
    names = set().union(*declared)
    required = set.intersection(*(set(d) for d in declared))
    for shape in shapes:
        unknown, missing = sorted(set(shape) - names), sorted(required - set(shape))
        if unknown or missing:
            raise ValueError(f"--shape {','.join(f'{k}={v}' for k, v in shape.items())}: "
                             + "; ".join(filter(None, [f"unknown name(s) {unknown}" if unknown else "",
                                                       f"missing name(s) {missing}" if missing else ""]))
                             + f"; the spec's shapes use {sorted(names)}")
        for key, val in shape.items():
            kinds = {type(d[key]) for d in declared if key in d}
            if kinds == {int} and (not isinstance(val, int) or val < 0):
                raise ValueError(f"--shape {key}={val}: must be an integer >= 0, like the spec's shapes")


def run(args) -> int:
    from fusecheck.dist.backends import BackendUnavailable, select_backend
    from fusecheck.dist.spec import load_spec
    try:
        task = build_task(args)
        spec = load_spec(task.spec_ref, **task.spec_kwargs)
        check_shapes(task.shapes, spec)
        world = int(os.environ["WORLD_SIZE"]) if "RANK" in os.environ else args.world_size
        backend = select_backend(args.backend, world if "RANK" not in os.environ else 1)
        supported = getattr(spec, "backends", None)
        if supported and backend.name not in supported:
            raise BackendUnavailable(f"{args.spec} runs only on {', '.join(supported)} "
                                     f"(selected: {backend.name}); {spec.requirement()}")
    except Exception as exc:  # bad usage or bad input: say what, exit 2
        print(f"fusecheck dist: error: {exc}", file=sys.stderr)
        return 2
    if "RANK" in os.environ:
        from fusecheck.dist.torchrun import run_under_torchrun
        return run_under_torchrun(task, backend, args)
    return _run_pool(task, world, backend.name, args)


def _run_pool(task: CheckTask, world: int, backend: str, args) -> int:
    from fusecheck.dist.report import render, write_json
    from fusecheck.dist.runner import check
    try:
        rep = check(task, world, backend, timeout_s=args.timeout, start_method=args.start_method)
    except Exception as exc:
        print(f"fusecheck dist: tool error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    print(render(rep))
    if args.json:
        write_json(rep, args.json)
    return rep.exit_code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fusecheck dist", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
