"""One check as executed on every rank: shapes x repeats x layers, streaming progress and results.

Shared by the rank pool (results go to the parent through a pipe) and by torchrun (results gathered to
rank 0). `emit(kind, payload)` is the only way out: "enter" marks a phase (the parent's deadline restarts),
"result" carries one rank's verdict for one run.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist

from fusecheck.distributed.layers import RunContext, comm_layer, compute_layer, probe_variants, whole_layer
from fusecheck.distributed.spec import load_spec
from fusecheck.distributed.stress import StressConfig, stable_seed
from fusecheck.policy import Policy

LAYERS = ("comm", "compute", "whole")


@dataclass
class CheckTask:
    spec_ref: str
    spec_kwargs: dict = field(default_factory=dict)
    shapes: list = field(default_factory=list)     # empty: the spec's own shapes
    dtype: str = "float32"
    seed: int = 0
    repeat: int = 1
    stress: bool = False
    max_delay_ms: float = 20.0
    layers: tuple = LAYERS
    policy: Policy = field(default_factory=Policy)
    barrier_timeout_s: float = 10.0


def run_check(task: CheckTask, rank: int, world: int, group, device: torch.device,
              emit: Callable[[str, object], None]) -> None:
    spec = load_spec(task.spec_ref, **task.spec_kwargs)
    dtype = getattr(torch, task.dtype)
    shapes = task.shapes or list(spec.shapes)
    if not shapes:
        raise ValueError(f"{task.spec_ref} declares no shapes and none were given")
    for si, shape in enumerate(shapes):
        def ctx(seed, stress=None, label=""):
            return RunContext(spec, group, rank, world, shape, dtype, seed, device, task.policy, stress,
                              on_call=lambda name: emit("call", name),
                              poison_seed=stable_seed(task.seed, si, sorted(shape.items())),
                              on_phase=lambda phase: emit("enter", phase), label=label)
        for rep in range(task.repeat):
            seed = task.seed + rep
            stress = StressConfig.for_run(rep, task.max_delay_ms, seed, world) if task.stress else None
            if "compute" in task.layers:
                # every repeat's inputs (so a data-dependent compute bug is not mistaken for a race);
                # on the first repeat also NaN/Inf and magnitude probes in each tensor in turn
                for variant in [None, *(probe_variants(ctx(seed)) if rep == 0 else [])]:
                    emit("enter", f"shape {si} repeat {rep} compute {variant or 'finite'}")
                    emit("result", {"shape_index": si, "repeat": rep, "seed": seed,
                                    **compute_layer(ctx(seed), variant)})
            for layer, fn in (("comm", comm_layer), ("whole", whole_layer)):
                if layer not in task.layers:
                    continue
                # under --stress a repeat runs plain *and* stressed: a delay can hide a race as well as expose
                # it (docs/benchmarks.md), so the stressed run only ever adds a chance to see it
                for cfg in (None, stress) if stress else (None,):
                    name = f"{layer} stressed" if cfg else layer
                    label = f"shape {si} repeat {rep} {name}"
                    emit("enter", label)
                    out = fn(ctx(seed, cfg, label))
                    emit("result", {"shape_index": si, "repeat": rep, "seed": seed,
                                    **({"variant": "stressed", "stress": cfg.label} if cfg else {}), **out})
            emit("enter", f"shape {si} repeat {rep} barrier")
            # names a rank that stopped answering (rank 0 raises "Ranks N failed to pass monitoredBarrier")
            barrier(group, task.barrier_timeout_s)


def barrier(group, timeout_s: float) -> None:
    """monitored_barrier where the backend has it (gloo): rank 0 then names the ranks that did not arrive."""
    if dist.get_backend(group) == "gloo":
        dist.monitored_barrier(group, timeout=datetime.timedelta(seconds=timeout_s), wait_all_ranks=True)
    else:
        dist.barrier(group)
