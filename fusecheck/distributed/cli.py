"""`fusecheck dist SPEC... --world-size N`: check fused communication + compute kernels layer by layer
(1: communication alone, exact; 2: compute alone, against fp64; 3: the whole kernel) and say which part is wrong.

Exit codes: 0 pass, 1 fail, 2 bad usage or a broken spec, 3 a rank hung or crashed (or a tool error).
Several specs (or a folder of them) run in one process on one pool of ranks, with one summary and one exit code.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass

from fusecheck.distributed.options import DTYPES, LAYERS


@dataclass
class Planned:
    """One target of the command: the task to run, or why it is skipped / broken."""
    ref: str
    task: CheckTask | None = None
    skip: str = ""       # folder targets that cannot run on this backend
    error: str = ""      # a folder target whose spec is broken (exit 2)


def _shape(item: str) -> dict:
    out = {}
    for part in filter(None, item.split(",")):
        key, sep, val = part.partition("=")
        if not sep:
            raise ValueError(f"--shape {part!r} must be key=value")
        out[key.strip()] = _num(val.strip())
    return out


def _num(v: str):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def check_options(args) -> tuple:
    layers = tuple(x for x in args.layers.split(",") if x)
    unknown = set(layers) - set(LAYERS)
    if unknown:
        raise ValueError(f"unknown layer(s) {sorted(unknown)}; known: {', '.join(LAYERS)}")
    if not layers:
        raise ValueError(f"--layers {args.layers!r} names no layer; known: {', '.join(LAYERS)}")
    if args.repeat < 1 or not 0 < args.timeout < math.inf:
        raise ValueError("--repeat must be >= 1 and --timeout a finite number > 0")
    if not 0 <= args.max_delay_ms < math.inf:
        raise ValueError(f"--max-delay-ms must be a finite number >= 0, not {args.max_delay_ms}")
    if args.stress and args.max_delay_ms / 1000 >= args.timeout / 4:
        raise ValueError(f"--max-delay-ms {args.max_delay_ms:g} with --timeout {args.timeout:g} s: a stress delay must "
                         "stay below a quarter of the timeout, or a correct kernel's delayed rank is reported as HANG")
    return layers


def check_world(world: int) -> None:
    """A distributed kernel is checked on two ranks or more: on one, every collective is the identity, so a
    kernel that sends a chunk to the wrong rank, or sums in the wrong order, would pass."""
    if world < 2:
        raise ValueError(f"world size {world}: a distributed kernel needs at least 2 ranks (on one rank every "
                         "collective is the identity and routing bugs cannot show)")


def build_task(args, ref: str, spec_kwargs: dict, layers: tuple) -> CheckTask:
    from fusecheck.distributed.task import CheckTask
    from fusecheck.policy import Policy
    return CheckTask(spec_ref=ref, spec_kwargs=spec_kwargs, shapes=[_shape(s) for s in args.shape],
                     dtype=DTYPES[args.dtype], seed=args.seed, repeat=args.repeat, stress=args.stress,
                     max_delay_ms=args.max_delay_ms, layers=layers, policy=Policy.load(args.policy),
                     barrier_timeout_s=args.timeout)


def check_shapes(shapes: list[dict], spec) -> None:
    """--shape dicts must use exactly the shape names the spec declares (a typo or a missing name would
    otherwise surface as a KeyError on every rank) with values of the declared kinds."""
    from fusecheck.distributed.spec import SpecError
    declared = getattr(spec, "shapes", []) or []
    if not isinstance(declared, (list, tuple)) or not all(isinstance(d, dict) for d in declared):
        raise SpecError(f"{type(spec).__name__}.shapes must be a list of dicts like [{{'m': 8, 'k': 4}}], "
                        f"not {declared!r}"[:300])
    declared = [dict(s) for s in declared]
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


def plan(args, world: int, backend) -> list[Planned]:
    """Every target checked before any rank starts. A target named on the command line that is broken or
    cannot run here raises (exit 2); one found in a file or folder becomes a skipped or broken row."""
    import torch

    from fusecheck.distributed.spec import expand_targets, load_spec, spec_class, typed_spec_args, validate_spec
    layers = check_options(args)
    targets = expand_targets(args.targets)
    typed, accepted, broken = {}, set(), {}
    for ref, explicit in targets:
        try:
            kwargs, _ = typed_spec_args(spec_class(ref), args.spec_arg)
        except ValueError as exc:
            if explicit:
                raise
            broken[ref] = str(exc)   # a folder's file that does not import: its own ERROR row
            continue
        typed[ref] = kwargs
        accepted |= set(kwargs)
    unused = {item.partition("=")[0].strip() for item in args.spec_arg} - accepted
    if unused:
        raise ValueError(f"--spec-arg {', '.join(sorted(unused))}: no spec's constructor takes it")
    out = []
    for ref, explicit in targets:
        if ref in broken:
            out.append(Planned(ref, error=broken[ref]))
            continue
        try:
            task = build_task(args, ref, typed[ref], layers)
            spec = load_spec(ref, **task.spec_kwargs)
            supported = getattr(spec, "backends", None)
            if supported and backend.name not in supported:
                reason = (f"{ref} runs only on {', '.join(supported)} (selected: {backend.name}); "
                          f"{spec.requirement()}")
                if explicit:
                    raise ValueError(reason)
                out.append(Planned(ref, skip=reason))
                continue
            check_shapes(task.shapes, spec)
            validate_spec(spec, ref, task.shapes or list(spec.shapes), world, task.seed, getattr(torch, task.dtype))
            out.append(Planned(ref, task))
        except ValueError as exc:
            if explicit:
                raise
            out.append(Planned(ref, error=str(exc)))
    return out


def run(args) -> int:
    from fusecheck.distributed.backends import BackendUnavailable, select_backend
    under_torchrun = "RANK" in os.environ
    try:
        world = int(os.environ["WORLD_SIZE"]) if under_torchrun else args.world_size
        check_options(args)
        check_world(world)
        backend = select_backend(args.backend, world if not under_torchrun else 1)
        outside = processes_outside(args.group, backend.name, under_torchrun)
        if outside and backend.device_type != "cpu":   # the extra process needs a device of its own
            try:
                backend = select_backend(backend.name, world + outside)
            except BackendUnavailable as exc:
                raise BackendUnavailable(f"{exc} (--group sub adds {outside} process outside the kernel's group; "
                                         "--group world runs without it)") from None
        planned = plan(args, world, backend)
    except (ValueError, BackendUnavailable) as exc:  # bad usage or a broken spec: say what, exit 2
        print(f"fusecheck dist: error: {exc}", file=sys.stderr)
        return 2
    if under_torchrun:
        from fusecheck.distributed.torchrun import run_under_torchrun
        return run_under_torchrun(planned, backend, args)
    return _run_pool(planned, world, backend.name, args, outside)


def processes_outside(group: str, backend: str, under_torchrun: bool) -> int:
    """Processes started outside the kernel's group: 1 for a subgroup (`--group sub`, and `auto` on gloo, where
    the extra rank costs a forked process and no device), else 0."""
    if group == "sub" and under_torchrun:
        raise ValueError("--group sub starts an extra process outside the kernel's group; under torchrun every "
                         "process is a rank of the kernel (use the rank pool, or --group world)")
    return int(group == "sub" or (group == "auto" and backend == "gloo" and not under_torchrun))


def _run_pool(planned: list[Planned], world: int, backend: str, args, outside: int) -> int:
    from fusecheck.cli import watchdog
    from fusecheck.distributed.runner import check
    reports = {}
    for p in planned:
        if p.task is None:
            continue
        watchdog.phase(f"checking {p.ref}")
        try:
            reports[p.ref] = check(p.task, world, backend, timeout_s=args.timeout, start_method=args.start_method,
                                   outside=outside)
        except Exception as exc:
            print(f"fusecheck dist: tool error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 3
    from fusecheck.distributed.report import finish
    return finish(planned, reports, args)
