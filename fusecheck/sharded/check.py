"""The check on one rank of a sharded model: eager, compiled (per block) and the streamed fp64 golden, with
this rank's outputs and gradient shards judged by the single-process core (`RowJudge`, `compare`).

The golden runs the model's own forward with one piece upcast at a time (fusecheck/streamed/). Under FSDP2
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
import time
from typing import Any

import torch
import torch.distributed as dist

from fusecheck.capture import GraphCapture
from fusecheck.case import Case, TargetError
from fusecheck.compare import Comparison
from fusecheck.decisions.tap import decision_nodes
from fusecheck.digest import digest
from fusecheck.execute import RunResult, run_once
from fusecheck.golden import cast_tree
from fusecheck.memory import MemoryLog
from fusecheck.policy import Policy
from fusecheck.precision_notes import eager_precision_notes, pinned_fp32, pinned_note
from fusecheck.rows import RowJudge
from fusecheck.sharded import shard
from fusecheck.sharded.blocks import judge_sharded_blocks
from fusecheck.streamed.golden import StreamedGolden
from fusecheck.streamed.per_block import BlockRecorder, judge_blocks, replay_compiled
from fusecheck.streamed.plan import make_plan


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def run_sharded(fn, case: Case, *, train: bool, cotangents, seed: int, digests_only: bool = False,
                differs_from: dict | None = None) -> RunResult:
    """`run_once`, with each parameter's gradient read from where FSDP puts it: this rank's shard. With
    `differs_from` (the first run's digests), results whose bits differ are kept in full to be judged."""
    params = dict(case.model.named_parameters())
    for p in params.values():
        p.grad = None
    result = run_once(fn, case, train=train, cotangents=cotangents, seed=seed, param_grads=False,
                      digests_only=digests_only, differs_from=differs_from)
    for name, p in params.items():
        if p.grad is not None:
            g = _local(p.grad).detach().clone()
            if digests_only:
                d = result.digests[f"grad.{name}"] = digest(g)
                if differs_from is not None and differs_from.get(f"grad.{name}") != d:
                    result.differing[f"grad.{name}"] = g
            else:
                result.grads[f"grad.{name}"] = g
            p.grad = None
    return result


def _differing(first: RunResult, again: RunResult) -> set[str]:
    return {k for k, v in first.all().items() if again.digests.get(k) != digest(v)}


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


def check_rank(case: Case, *, backend, dtype: torch.dtype | None, device: torch.device, train: bool,
               policy: Policy, seed: int, blocks: str | None, progress,
               block_verdicts: bool = True, tf32: bool = False) -> tuple[dict[str, Any], list]:
    """This rank's rows, notes, timings and peak memory (everything rank 0 needs to report, picklable), and
    the graphs it captured (kept on the rank). TF32 is pinned off on CUDA unless `tf32`, as in `run_check`."""
    with pinned_fp32(device.type, keep=tf32):
        result, graphs = _check_rank(case, backend=backend, dtype=dtype, device=device, train=train,
                                     policy=policy, seed=seed, blocks=blocks, progress=progress,
                                     block_verdicts=block_verdicts)
        result["notes"] += eager_precision_notes(device.type, dtype)  # only where --tf32 kept TF32 on
    result["notes"] += pinned_note(device.type, dtype, tf32)
    return result, graphs


def _check_rank(case: Case, *, backend, dtype, device, train, policy, seed, blocks, progress,
                block_verdicts) -> tuple[dict[str, Any], list]:
    rank, world = dist.get_rank(), dist.get_world_size()
    model = case.model
    if not isinstance(model, torch.nn.Module):
        raise TargetError("a sharded check needs an nn.Module target")
    plan = make_plan(model, blocks)
    if plan is None:
        raise TargetError(f"a sharded check shards the model per block, and {case.name!r} has no nn.ModuleList "
                          "of two or more children: name its blocks with --blocks 'GLOB'")
    timings: dict[str, float] = {}
    mem = MemoryLog(device)

    current = ["start"]
    for block_name, block in plan.blocks:  # progress per block: a stuck rank is named with the block it is in
        block.register_forward_pre_hook(lambda *_, n=block_name: progress(f"{current[0]}: {n}"), prepend=True)

    @contextlib.contextmanager
    def measured(name: str):
        current[0] = name
        progress(name)
        t = time.perf_counter()
        with mem.phase(name):
            yield
        timings[name] = time.perf_counter() - t

    tp_plan = getattr(model, "fusecheck_tp_plan", None)  # the target asks for tensor parallelism
    with measured("shard"):
        meta = shard.on_meta(model)
        if dtype is not None:
            model.to(dtype)
        if tp_plan:
            if not meta:
                model.to(device)
            shard.tensor_parallel_blocks(plan.blocks, tp_plan, device)
        else:
            shard.fully_shard_blocks(model, plan.blocks, device)
        if meta:
            shard.materialize(model, device, seed)
        model.eval()
    inputs = Case(model, cast_tree(case.inputs, dtype, device), case.name, cast_tree(case.kwargs, dtype, device))
    buffers = _buffer_digests(model)

    run = functools.partial(run_sharded, case=inputs, train=train, seed=seed)
    recorder = BlockRecorder(plan.blocks) if block_verdicts else None
    with measured("eager"):
        with recorder or contextlib.nullcontext():
            eager = run(model, cotangents=None)
        eager2 = run(model, cotangents=eager.cotangents, digests_only=True)
    capture = GraphCapture(backend.make())
    torch._dynamo.reset()
    shard.compile_blocks(plan.blocks, capture)
    try:
        with measured("compiled"), shard.enough_recompiles(len(plan.blocks)):
            compiled = run(model, cotangents=eager.cotangents)
            first = {k: digest(v) for k, v in compiled.all().items()}  # every compiled run is judged
            compiled2 = run(model, cotangents=eager.cotangents, digests_only=True, differs_from=first)
            if recorder is not None:
                replay_compiled(recorder, train)
    finally:
        shard.uncompile_blocks(plan.blocks)
    if _buffer_digests(model) != buffers:
        raise TargetError(f"{case.name!r} updates its buffers in place; the sharded check does not reset module "
                          "state between runs: check it on one process")
    compiled_noisy = _differing(compiled, compiled2)
    judge = RowJudge(eager.all(), compiled.all(), policy, eager_noisy=_differing(eager, eager2),
                     compiled_noisy=compiled_noisy,
                     compiled_again={k: v for k, v in compiled2.differing.items() if k in compiled_noisy},
                     keep_doubts=False)  # the noise band's extra eager runs are collective: one process only
    del compiled2
    names, extra = list(eager.all()), sorted(set(compiled.all()) - set(eager.all()))
    cotangents = eager.cotangents
    del eager, compiled

    with measured("golden"):
        _golden(inputs, model, plan, judge.judge, train=train, cotangents=cotangents, device=device,
                rank=rank, world=world, fsdp=not tp_plan)
    block_rows = []
    if recorder is not None:
        with measured("blocks"):
            block_rows = (judge_blocks(recorder, torch.float64, device, policy) if tp_plan
                          else judge_sharded_blocks(recorder, device, policy))
        del recorder
    unjudged = sorted(n for n in judge.eager if n.startswith("grad.") and not n.startswith("grad.input"))
    for name in list(judge.eager):
        judge.judge(name, None)
    rows: list[Comparison] = [judge.rows[n] for n in names if n in judge.rows]
    notes = []
    if unjudged:  # never silent: a gradient shard without its golden is judged against eager only
        notes.append(f"{len(unjudged)} gradient shard(s) got no fp64 golden and were judged against eager only: "
                     + ", ".join(unjudged[:4]))
    if extra:
        notes.append(f"compiled produced results eager did not: {', '.join(extra)}")
    if not capture.graphs:
        notes.append("the backend was never called: dynamo captured no graph, compiled ran eagerly")
    notes += _unfollowed_decisions(capture)
    return {"rank": rank, "rows": rows, "notes": notes, "seconds": timings, "memory": mem.to_dict(),
            "n_graphs": len(capture.graphs), "blocks": block_rows, "layout": "tp" if tp_plan else "fsdp",
            "plan": plan.describe(), "meta": meta,
            "shard_bytes": sum(_local(p).numel() * p.element_size() for p in model.parameters())}, capture.graphs


def _unfollowed_decisions(capture: GraphCapture) -> list[str]:
    """Never silent: the sharded check's golden does not follow near-tied decisions (decisions/) yet, so a
    routing or mask tie that a single-process check would follow can fail here."""
    found = [n for g in capture.graphs for n in decision_nodes(g.gm)]
    if not found:
        return []
    return [f"decisions: the compiled blocks take {len(found)} discrete decision(s) ({', '.join(found[:4])}) that "
            "a sharded check does not line up with the golden: a FAIL where two choices are near-tied may be "
            "the tie, not the kernel; a single-process check of a smaller config follows them"]


def _golden(case: Case, model, plan, sink, *, train, cotangents, device, rank, world, fsdp: bool) -> None:
    """`golden_runs.run_streamed` on a sharded model: gradients named by the unsharded parameters a running
    block holds, and reduced over ranks to this rank's shard before they are judged."""
    gcase = Case(model, cast_tree(case.inputs, torch.float64, device), case.name,
                 cast_tree(case.kwargs, torch.float64, device))
    grads = _ShardedGrads(sink, rank, world, data_parallel=fsdp)
    with StreamedGolden(model, plan, torch.float64, device, train=train, on_grad=grads) as streamed:
        if train and fsdp:
            streamed.grads.names.update(_unsharded_names(model, [b for _, b in plan.blocks] + [model]))
        golden = run_once(model, gcase, train=train, param_grads=False,
                          cotangents=cast_tree(cotangents, torch.float64, device) if cotangents else None)
        streamed.finish()
    for name, t in golden.all().items():
        sink(name, t)
