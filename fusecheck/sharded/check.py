"""The check on one rank of a sharded model: eager, compiled (per block) and the streamed fp64 golden, with
this rank's outputs and gradient shards judged by the single-process core (`RowJudge`, `compare`).

The golden runs the model's own forward with one piece upcast at a time (fusecheck/golden/streamed/). Under FSDP2
a block's pre-forward hook all-gathers its (run-dtype) parameters first, so the fp64 copy is made of the
full block and freed right after it: memory per rank is the model's shard + one block in the run dtype
(FSDP's own all-gather) + one fp64 block. Upcasting the local shard instead and letting FSDP all-gather in
fp64 needs the same full fp64 block to compute with, plus an fp64 shard: it is never smaller.

Gradients: FSDP reduce-scatters each rank's gradients (the mean over ranks) into its shard. The golden's
fp64 gradient of each parameter is summed over ranks the same way (an fp64 all-reduce, divided by the world
size) and this rank's rows of it (dim 0, as FSDP shards) are judged against eager's and compiled's shards.

A target whose model carries `fusecheck_tp_plan` gets DTensor tensor parallelism inside each block instead:
the golden's upcast then makes an fp64 DTensor of this rank's shard (one fp64 block *shard* per rank), and
gradients, already per shard, are judged as they are.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
import torch.distributed as dist

from fusecheck.backends import resolve_backend
from fusecheck.capture import GraphCapture
from fusecheck.case import Case
from fusecheck.check.compiled import run_compiled
from fusecheck.check.eager import run_eager
from fusecheck.check.golden import run_blocks, run_golden
from fusecheck.check.judge import capture_notes, finish, mutated_keys, row_judge, run_notes
from fusecheck.check.options import CheckOptions
from fusecheck.check.pipeline import Pipeline
from fusecheck.check.single import report_dtype
from fusecheck.devices import resolve_device
from fusecheck.runs.digest import digest
from fusecheck.distributed.worker import backend_raised
from fusecheck.errors import TargetError
from fusecheck.runs.execute import RunResult, digest_kept, run_once
from fusecheck.runs.cast import cast_model, cast_tree
from fusecheck.policy import Policy
from fusecheck.check.precision_notes import pinned_fp32, pinned_note
from fusecheck.sharded import shard
from fusecheck.sharded.blocks import judge_sharded_blocks
from fusecheck.golden.streamed.golden import StreamedGolden
from fusecheck.golden.streamed.per_block import BlockRecorder, judge_blocks, replay_compiled
from fusecheck.golden.streamed.plan import NO_STACK, make_plan


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def run_sharded(fn, case: Case, *, train: bool, cotangents, seed: int, digests_only: bool = False,
                differs_from: dict | None = None, each=None) -> RunResult:
    """`run_once`, with each parameter's gradient read from where FSDP puts it: this rank's shard. With
    `differs_from` (the first run's digests), results whose bits differ are kept in full to be judged."""
    params = dict(case.model.named_parameters())
    for p in params.values():
        p.grad = None
    result = run_once(fn, case, train=train, cotangents=cotangents, seed=seed, param_grads=False,
                      digests_only=digests_only, differs_from=differs_from, each=each)
    for name, p in params.items():
        if p.grad is not None:
            g = _local(p.grad).detach().clone()
            if digests_only:
                result.digests[f"grad.{name}"] = digest_kept(f"grad.{name}", g, differs_from, result.differing, each)
            else:
                result.grads[f"grad.{name}"] = g
            p.grad = None
    return result


def _buffer_digests(model: torch.nn.Module) -> dict:
    return {n: digest(b) for n, b in model.named_buffers()}


def _unsharded_names(model: torch.nn.Module, groups: list[torch.nn.Module]) -> dict[int, str]:
    """id of each FSDP-unsharded parameter (what a block holds while it runs) -> the parameter's name."""
    names: dict[int, str] = {}
    for group in groups:
        group.unshard()
        prefix = next(n for n, m in model.named_modules() if m is group)
        for n, p in group.named_parameters():
            names[id(p)] = f"{prefix}.{n}" if prefix else n
        group.reshard()
    return names


class _ShardedGrads:
    """FSDP: the golden's full fp64 gradient of a parameter -> the mean over ranks -> this rank's dim-0 shard.
    Tensor parallelism: every rank ran the same data, the gradient is already this rank's shard (a DTensor)."""

    def __init__(self, sink, rank: int, world: int, data_parallel: bool = True):
        self.sink, self.rank, self.world, self.data_parallel = sink, rank, world, data_parallel

    def __call__(self, name: str, grad: torch.Tensor) -> None:
        if not self.data_parallel:
            self.sink(f"grad.{name}", _local(grad))
            return
        grad = grad.contiguous()
        dist.all_reduce(grad)
        grad /= self.world
        chunks = torch.chunk(grad, self.world, dim=0) if grad.dim() else [grad] * self.world
        mine = chunks[self.rank] if self.rank < len(chunks) else grad.new_empty((0, *grad.shape[1:]))
        self.sink(f"grad.{name}", mine)


def agree(flag: bool) -> bool:
    """any(flag) over the ranks: a stage that runs once more does so on every rank, or the others would wait."""
    t = torch.tensor([int(flag)], device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def check_rank(case: Case, opts: CheckOptions, device: torch.device, progress) -> tuple[dict[str, Any], list]:
    """This rank's rows, notes, timings and peak memory (everything rank 0 needs to report, picklable), and
    the graphs it captured (kept on the rank). TF32 is pinned off on CUDA unless `tf32`, as in `run_check`."""
    with pinned_fp32(device.type, keep=opts.tf32):
        result, graphs = _check_rank(case, opts, device, progress)
    result["notes"] += pinned_note(device.type, report_dtype(opts.dtype), opts.tf32)
    return result, graphs


def _check_rank(case: Case, opts: CheckOptions, device: torch.device, progress) -> tuple[dict[str, Any], list]:
    rank, world = dist.get_rank(), dist.get_world_size()
    model = case.model
    if not isinstance(model, torch.nn.Module):
        raise TargetError("a sharded check needs an nn.Module target")
    plan = make_plan(model, opts.blocks)
    if plan is None:
        raise TargetError(f"a sharded check shards the model per block, and {case.name!r} has {NO_STACK}: name "
                          "its blocks with --blocks 'GLOB'")
    dtype = report_dtype(opts.dtype)
    policy = opts.policy or Policy()
    current = ["start"]
    for block_name, block in plan.blocks:  # progress per block: a stuck rank is named with the block it is in
        block.register_forward_pre_hook(lambda *_, n=block_name: progress(f"{current[0]}: {n}"), prepend=True)

    def phase_progress(name: str) -> None:
        current[0] = name
        progress(name)

    gdev = resolve_device(device.type)
    tp_plan = getattr(model, "fusecheck_tp_plan", None)  # the target asks for tensor parallelism
    inputs = Case(model, cast_tree(case.inputs, dtype, device), case.name, cast_tree(case.kwargs, dtype, device))
    p = Pipeline(inputs, opts, policy, resolve_backend(opts.backend), device, gdev.golden_dtype, device,
                 functools.partial(run_sharded, case=inputs, train=opts.train, seed=opts.seed),
                 agree=agree, raw=backend_raised, progress=phase_progress)
    with p.measured("shard"):
        meta = shard.on_meta(model)
        if dtype is not None:
            cast_model(model, dtype, None)
        if tp_plan:
            if not meta:
                model.to(device)
            shard.tensor_parallel_blocks(plan.blocks, tp_plan, device)
        else:
            shard.fully_shard_blocks(model, plan.blocks, device)
        if meta:
            shard.materialize(model, device, seed=opts.seed)
        model.eval()
    buffers = _buffer_digests(model)

    recorder = BlockRecorder(plan.blocks) if opts.block_verdicts else None
    eager = run_eager(p, recorder)
    compiled = run_compiled(p, eager, _compiling(plan, model),
                            after=(lambda: replay_compiled(recorder, opts.train)) if recorder is not None else None)
    if _buffer_digests(model) != buffers:
        raise TargetError(f"{case.name!r} updates its buffers in place; the sharded check does not reset module "
                          "state between runs: check it on one process")
    mutated = mutated_keys(eager, compiled)
    # the noise band's extra eager runs are collective and per row: one process only
    judge = row_judge(p, eager, compiled, keep_doubts=False)
    names, compiled_keys = list(judge.eager), set(judge.compiled)
    cotangents, skipped = eager.first.cotangents, eager.skipped
    eager.first = compiled.first = None
    p.notes += capture_notes(p, compiled)

    def golden(sink):
        _golden(inputs, model, plan, sink, train=opts.train, cotangents=cotangents, dtype=p.golden_dtype,
                device=device, rank=rank, world=world, fsdp=not tp_plan)
    fallback = run_golden(p, judge, compiled, golden, "streamed per rank")
    block_rows = run_blocks(p, recorder, fallback, lambda rec: (
        judge_blocks(rec, p.golden_dtype, device, policy) if tp_plan
        else judge_sharded_blocks(rec, p.golden_dtype, device, policy)))
    del recorder
    p.notes += fallback.notes()
    p.notes += run_notes(p, eager, compiled, mutated, dtype)
    unjudged = sorted(n for n in judge.eager if n.startswith("grad.") and not n.startswith("grad.input"))
    if unjudged:  # never silent: a gradient shard without its golden is judged against eager only
        p.notes.append(f"{len(unjudged)} gradient shard(s) got no fp64 golden and were judged against eager only: "
                       + ", ".join(unjudged[:4]))
    rows = finish(p, judge, names, compiled_keys)
    return {"rank": rank, "rows": rows, "notes": p.notes, "seconds": p.timings, "memory": p.mem.to_dict(),
            "n_graphs": len(compiled.capture.graphs), "blocks": block_rows, "layout": "tp" if tp_plan else "fsdp",
            "plan": plan.describe(), "meta": meta,
            "shard_bytes": sum(_local(p).numel() * p.element_size() for p in model.parameters())}, \
        compiled.capture.graphs


def _compiling(plan, model):
    @contextlib.contextmanager
    def compiling(capture: GraphCapture):
        shard.compile_blocks(plan.blocks, capture)
        try:
            with shard.enough_recompiles(len(plan.blocks)):
                yield model
        finally:
            shard.uncompile_blocks(plan.blocks)
    return compiling


def _golden(case: Case, model, plan, sink, *, train, cotangents, dtype, device, rank, world, fsdp: bool) -> None:
    """`golden_runs.run_streamed` on a sharded model: gradients named by the unsharded parameters a running
    block holds, and reduced over ranks to this rank's shard before they are judged."""
    gcase = Case(model, cast_tree(case.inputs, dtype, device), case.name, cast_tree(case.kwargs, dtype, device))
    grads = _ShardedGrads(sink, rank, world, data_parallel=fsdp)
    with StreamedGolden(model, plan, dtype, device, train=train, on_grad=grads) as streamed:
        if train and fsdp:
            streamed.grads.names.update(_unsharded_names(model, [b for _, b in plan.blocks] + [model]))
        golden = run_once(model, gcase, train=train, param_grads=False,
                          cotangents=cast_tree(cotangents, dtype, device) if cotangents else None)
        streamed.finish()
    for name, t in golden.all().items():
        sink(name, t)
