"""The three layers, as run inside one rank: each returns this rank's verdict for one run.

  comm    (layer 1): the kernel with identity compute on position tags in the op dtype (one or more sub-runs),
                     vs the collective's invariant, exact; wrong elements are decoded to source rank/block.
  compute (layer 2): the kernel's compute with identity communication, fed what the collective would have
                     delivered, vs torch ops in the op dtype and in fp64; also with NaN/Inf planted in inputs
                     and with rows scaled to huge / tiny / subnormal magnitudes.
  whole   (layer 3): the fused kernel vs a torch.distributed collective + torch ops, in the op dtype and fp64.
"""
from __future__ import annotations

import functools
import hashlib
import math
from typing import Callable

import torch
import torch.distributed as dist

from fusecheck.compare import compare, input_error
from fusecheck.distributed import reference, workspace
from fusecheck.distributed.collectives import COLLECTIVES
from fusecheck.distributed.spec import DistSpec
from fusecheck.distributed.stress import StressConfig, injected_delays, stable_seed
from fusecheck.distributed.tags import explain
from fusecheck.policy import Policy


class RunContext:
    """Everything one rank needs for one run: spec, group, rank, world, shape, dtype, seed, device."""

    def __init__(self, spec: DistSpec, group, rank: int, world: int, shape: dict, dtype: torch.dtype, seed: int,
                 device: torch.device, policy: Policy, stress: StressConfig | None, on_call=None,
                 poison_seed: int | None = None, on_phase=None, label: str = ""):
        self.spec, self.group, self.rank, self.world = spec, group, rank, world
        self.shape, self.dtype, self.seed, self.device = shape, dtype, seed, device
        self.policy, self.stress, self.on_call = policy, stress, on_call
        # the phase this run is (task.py names it) and how to announce a new one: the rank pool counts dist
        # calls per phase, so a rank that skipped a kernel collective is told apart from one that went on to
        # the checker's own collectives (the replay decision)
        self.on_phase, self.label = on_phase, label
        # the workspace poison must not change between repeats of one shape: a slot that is never written
        # (a layout bug) then reads the same garbage every repeat, and only a race makes layer 1 vary
        self.poison_seed = seed if poison_seed is None else poison_seed

    def inputs(self, rank: int) -> dict[str, torch.Tensor]:
        made = self.spec.make_inputs(dict(self.shape), rank, self.world, self.seed, self.dtype)
        return {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in made.items()}

    def all_inputs(self) -> list[dict[str, torch.Tensor]]:
        return [self.inputs(r) for r in range(self.world)]

    def kernel_call(self, fn, *args, stress: StressConfig | None = None):
        """Run a kernel entry point: workspaces poisoned first, stress delays (this run's, or `stress`) around
        its communication."""
        workspace.poison_all(stable_seed(self.poison_seed, self.rank, fn.__name__))
        with injected_delays(stress or self.stress, self.rank, self.on_call):
            return fn(*args)


def _same_inputs(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype
                    and torch.equal(torch.nan_to_num(x), torch.nan_to_num(y))):
                return False
        elif x != y:
            return False
    return True


def _not_rank_distinct(sources: list) -> str:
    """Why the collective's inputs cannot show a misrouted block (two ranks' inputs are bitwise equal), or ''."""
    seen: dict[str, int] = {}
    for r, t in enumerate(sources):
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            return ""
        d = digest(t)
        if d in seen:
            return (f"inputs are not rank-distinct: a misrouted block cannot be seen (comm_input of ranks {seen[d]} "
                    f"and {r} are bitwise equal; make_inputs must depend on its rank argument)")
        seen[d] = r
    return ""


def _clone(inputs: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _to(inputs: dict, dtype: torch.dtype) -> dict:
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in inputs.items()}


def _result(ctx: RunContext, layer: str, cmp, **extra) -> dict:
    return {"layer": layer, "rank": ctx.rank, "status": cmp.verdict.status.value, "passed": cmp.passed,
            "comparison": cmp.to_dict(), **extra}


def comm_layer(ctx: RunContext) -> dict:
    """Layer 1, in the op dtype: the tags' digits go through `comm_only` in one or more sub-runs (all must be
    exact); a wrong element is decoded from all its sub-runs at once."""
    coll = COLLECTIVES[ctx.spec.collective]
    sources = [ctx.spec.comm_input(i) for i in ctx.all_inputs()]
    bad = coll.precondition(sources, ctx.world)
    if bad:
        return _result(ctx, "comm", input_error("comm", "bad_input", f"{coll.name}: {bad}"))
    shape, numel = tuple(sources[0].shape), sources[0].numel()
    try:
        plan = coll.tags.plan(ctx.dtype, ctx.world, numel)
    except ValueError as exc:
        return _result(ctx, "comm", input_error("comm", "bad_input", f"{coll.name}: {exc}"))
    tags = [[t.to(ctx.device) for t in plan.encode(r, shape)] for r in range(ctx.world)]
    reason = f"layer 1 moves exact position tags ({coll.invariant}; tags: {plan.description})"
    exps = [coll.deliver([t[sub] for t in tags], ctx.rank) for sub in range(plan.subruns)]
    gots, bad = _comm_subruns(ctx, tags, exps)
    if bad is not None:   # the wrong type/shape/dtype/device: no positions to decode
        cmp = compare(bad, exps[len(gots)], exact=True, exact_reason=reason, name="comm", policy=ctx.policy)
        _any_rank(ctx, True, "a replay")   # the other ranks decide on a replay: keep the collectives matched
        _comm_subruns(ctx, tags, exps, stress=SETTLE)
        return _result(ctx, "comm", cmp, decoded=[], classes={}, digest=digest(bad),
                       tag_dtype=_name(plan.dtype), tags=plan.to_dict())
    got_all, exp_all = torch.stack(gots), torch.stack(exps)
    cmp = compare(got_all, exp_all, exact=True, exact_reason=reason, name="comm", policy=ctx.policy)
    lines, classes = [], {}
    if not cmp.passed:
        row_len = max(1, numel // max(1, shape[0])) if shape else 1
        lines, classes = explain([g.cpu() for g in gots], [e.cpu() for e in exps], plan, row_len,
                                 ctx.spec.block_rows(shape[0] if shape else 1), ctx.rank)
        cmp.notes.extend(lines)
    # tags do not depend on the seed: a deterministic kernel gets the same positions wrong in every repeat, even
    # where the values it leaves there (a never-written slot's workspace garbage) differ; `wrong` hashes which
    # positions are wrong, `digest` the bits
    wrong = digest((got_all != exp_all).to(torch.uint8))
    # a failing run replayed with every rank pausing after each dist call: a read-before-wait that loses
    # every time at full speed now wins, so a change of the wrong positions is timing, never layout
    timing = None
    if _any_rank(ctx, not cmp.passed, "a replay"):
        again, _ = _comm_subruns(ctx, tags, exps, stress=SETTLE)
        timing = len(again) == len(exps) and digest((torch.stack(again) != exp_all).to(torch.uint8)) != wrong
    return _result(ctx, "comm", cmp, decoded=lines, classes=classes, digest=digest(got_all), wrong=wrong,
                   tag_dtype=_name(plan.dtype), tags=plan.to_dict(), replay_changed=timing)


# the replay's pause after each dist call, on every rank (stress.StressConfig.settle_ms)
SETTLE = StressConfig(max_delay_ms=0.0, settle_ms=20.0)


def _comm_subruns(ctx: RunContext, tags: list, exps: list, stress: StressConfig | None = None):
    """comm_only on each tag sub-run; (copies of the results, the first result of the wrong kind or None).
    Every rank calls comm_only for every sub-run, whatever it returns, so the collectives stay matched."""
    gots, bad = [], None
    for sub, expected in enumerate(exps):
        got = ctx.kernel_call(ctx.spec.comm_only, tags[ctx.rank][sub].clone(), ctx.group, stress=stress)
        if bad is not None:
            continue
        if not (isinstance(got, torch.Tensor) and got.shape == expected.shape and got.dtype == expected.dtype
                and got.device == expected.device):
            bad = got
            continue
        gots.append(got.detach().clone())   # a kernel may return its workspace, which the next sub-run re-poisons
    return gots, bad


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def plant_specials(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Copy of `t` with NaN, +Inf and -Inf planted (seeded) in a subset of positions that leaves finite values for
    layer 2 to judge. Viewed as rows x cols (leading dim x the rest; a 1-D tensor is one row), the specials go in
    at most cols - 1 columns of one row (a column-wise op such as `delivered @ b` with specials in `b` keeps a
    finite output column even when b has 3 columns or fewer); those that do not fit go to the same columns of
    other rows, using at most rows - 1 rows (a row-wise op such as a norm keeps a finite row). A tensor too small
    for all three (one row, or one column) gets fewer, NaN first. An op that mixes every element into every
    output (a norm of a single row) can still give an all-NaN/Inf output: it is then judged by positions."""
    t = t.clone(memory_format=torch.contiguous_format)   # so that `rows` below is a view of it
    if t.numel() == 0:
        return t
    rows = t.reshape(t.shape[0], -1) if t.dim() > 1 else t.reshape(1, -1)
    n_rows, n_cols = rows.shape
    specials = (float("nan"), float("inf"), float("-inf"))
    cols = torch.randperm(n_cols, generator=gen)[:max(1, min(len(specials), n_cols - 1))].tolist()
    use_rows = torch.randperm(n_rows, generator=gen)[:max(1, n_rows - 1)].tolist()
    slots = [(r, c) for r in use_rows for c in cols]
    for (r, c), val in zip(slots, specials):
        rows[r, c] = val
    return t


def special_targets(ctx: RunContext) -> list[str]:
    """Tensors that get NaN/Inf in turn: what communication delivers, then every floating input."""
    inputs = ctx.inputs(ctx.rank)
    names = ["delivered"] + [k for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]
    skip = set(getattr(ctx.spec, "no_nan_inf", ()) or ())
    unknown = sorted(skip - set(names) - set(inputs))
    if unknown:
        raise ValueError(f"{type(ctx.spec).__name__}.no_nan_inf names {unknown}, which are neither 'delivered' nor "
                         f"inputs of make_inputs ({', '.join(names)})")
    return [n for n in names if n not in skip]


# magnitude probe -> the largest |x| of the scaled rows, from the dtype's range: squares (and sums of a few
# squares) overflow; rows so small that an epsilon of 1e-6..1e-5 dominates their mean square; subnormals
MAGNITUDES: dict[str, Callable[[torch.finfo], float]] = {
    "huge": lambda fi: 2.0 * math.sqrt(fi.max),
    "tiny": lambda fi: 16.0 * fi.tiny,
    "subnormal": lambda fi: fi.tiny / 2,
}


def probe_variants(ctx: RunContext) -> list[str]:
    """Layer 2's extra variants on the first repeat: NaN/Inf in each tensor, then each magnitude probe on each
    group of same-shaped tensors (delivered first)."""
    specials = [f"nan_inf:{t}" for t in special_targets(ctx)]
    return specials + [f"magnitude:{m}:{t}" for m in MAGNITUDES for t in magnitude_targets(ctx)]


def magnitude_targets(ctx: RunContext) -> list[str]:
    """One name per group of floating tensors that share a shape, e.g. "delivered+residual" (scaled together:
    an op that adds them would otherwise see ordinary magnitudes again)."""
    inputs = ctx.inputs(ctx.rank)
    coll = COLLECTIVES[ctx.spec.collective]
    shapes = {"delivered": tuple(coll.deliver([ctx.spec.comm_input(i) for i in ctx.all_inputs()], ctx.rank).shape)}
    shapes.update({k: tuple(v.shape) for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point()})
    groups: dict[tuple, list[str]] = {}
    for name, shape in shapes.items():
        groups.setdefault(shape, []).append(name)
    return ["+".join(names) for names in groups.values()]


def scale_rows(tensors: dict[str, torch.Tensor], names: list[str], largest: float) -> dict[str, torch.Tensor]:
    """Copies of `tensors[names]` whose even rows (leading dim; 1-D: all) are scaled together so the largest
    |x| among them is `largest`; odd rows keep ordinary magnitudes (a row-wise op sees both kinds)."""
    def rows(t):
        return t.reshape(t.shape[0], -1)[::2] if t.dim() > 1 else t.reshape(1, -1)
    peak = max((float(rows(tensors[n].double()).abs().max()) for n in names if tensors[n].numel()), default=0.0)
    if peak == 0 or not math.isfinite(peak):
        return {}
    out = {}
    for n in names:
        t = tensors[n].double().clone(memory_format=torch.contiguous_format)
        if t.numel():
            rows(t).mul_(largest / peak)
        out[n] = t.to(tensors[n].dtype)
    return out


def _wide(fn, delivered: torch.Tensor, inputs: dict, dtype: torch.dtype) -> torch.Tensor:
    """`fn` computed in fp32 (or the op dtype if wider) and rounded once to the op dtype: the reference for
    magnitude probes, where plain eager ops in fp16/bf16 overflow or underflow as a broken kernel would."""
    acc = torch.promote_types(dtype, torch.float32)
    out = fn(delivered.to(acc), _to(inputs, acc))
    return out.to(dtype) if isinstance(out, torch.Tensor) and out.is_floating_point() else out


def compute_layer(ctx: RunContext, variant: str | None = None) -> dict:
    """Layer 2; `variant` is None (finite inputs), "nan_inf:<tensor>" (NaN/+Inf/-Inf planted there) or
    "magnitude:<probe>:<tensor>" (rows of that tensor and its same-shaped partners scaled to the probe)."""
    coll = COLLECTIVES[ctx.spec.collective]
    all_inputs = ctx.all_inputs()
    sources = [ctx.spec.comm_input(i) for i in all_inputs]
    bad = coll.precondition(sources, ctx.world)
    if bad:
        return _result(ctx, "compute", input_error("compute", "bad_input", f"{coll.name}: {bad}"))
    if variant is None and not _same_inputs(all_inputs[ctx.rank], ctx.inputs(ctx.rank)):
        return _result(ctx, "compute", input_error(
            "compute", "nondeterministic_inputs", "make_inputs returned different tensors for the same (shape, "
            "rank, world, seed, dtype): layers 1 and 2 regenerate other ranks' inputs and need a pure function"))
    same = _not_rank_distinct(sources) if variant is None else ""
    if same:   # layer 3 would pass a kernel that sends rank i's block to rank j's slot
        return _result(ctx, "compute", input_error("compute", "inputs_not_rank_distinct", same))
    delivered, inputs = coll.deliver(sources, ctx.rank), dict(all_inputs[ctx.rank])
    eager_fn = ctx.spec.compute_golden
    if variant and variant.startswith("nan_inf:"):
        special = variant.split(":", 1)[1]
        gen = torch.Generator().manual_seed(ctx.seed * 7919 + ctx.rank)
        if special == "delivered":
            delivered = plant_specials(delivered, gen)
        else:
            inputs[special] = plant_specials(inputs[special], gen)
    elif variant and variant.startswith("magnitude:"):
        _, probe, target = variant.split(":", 2)
        tensors = {"delivered": delivered, **{k: v for k, v in inputs.items()
                                              if isinstance(v, torch.Tensor) and v.is_floating_point()}}
        group = target.split("+")
        scaled = scale_rows(tensors, group, MAGNITUDES[probe](torch.finfo(delivered.dtype)))
        delivered = scaled.pop("delivered", delivered)
        inputs.update(scaled)
        eager_fn = functools.partial(_wide, ctx.spec.compute_golden, dtype=delivered.dtype)
    workspace.poison_all(ctx.seed)
    got = ctx.spec.compute_only(delivered.clone(), _clone(inputs))
    eager = eager_fn(delivered.clone(), _clone(inputs))
    gold = ctx.spec.compute_golden(delivered.double(), _to(inputs, torch.float64))
    probe = variant.startswith("nan_inf:") if variant else False
    name = f"compute[{variant or 'finite'}]"
    bad = _golden_contract(ctx, "compute_golden", name, eager, gold)
    if bad is not None:
        return _result(ctx, "compute", bad, variant=variant or "finite")
    cmp = compare(got, eager, gold, policy=ctx.policy, name=name, nonfinite_probe=probe)
    magnitude = bool(variant and variant.startswith("magnitude:"))
    if reference.needs_noise(cmp, magnitude):   # eager's order may just be luckier than the kernel's: its own noise
        reruns = []
        for label, mode in reference.compositions(delivered.dtype, magnitude):
            with mode:
                reruns.append((label, eager_fn(delivered.clone(), _clone(inputs))))
        cmp = reference.rejudge(got, eager, gold, reruns, ctx.policy, name, cmp, magnitude=magnitude,
                                 nonfinite_probe=probe)
    return _result(ctx, "compute", cmp, variant=variant or "finite")


# a failing whole-kernel run is replayed on the same inputs: once as it ran, once with each call of one
# straggler rank delayed. A race changes its bits under a different timing; a data-dependent bug gives the
# same bits every time, which no synchronization fault explains.
REPLAY_STRAGGLER_MS = 20.0


def replay(ctx: RunContext, inputs: dict, got) -> bool:
    """Whether the fused kernel, re-run on the same inputs (as it ran, then with a straggler), gives `got`'s bits
    every time. Called on every rank together (the kernel runs collectives)."""
    first = digest(got)
    same = True
    for straggler in (None, (ctx.seed + 1) % ctx.world):
        cfg = None if straggler is None else StressConfig(REPLAY_STRAGGLER_MS, ctx.seed, -1, straggler)
        again = ctx.kernel_call(ctx.spec.fused, _clone(inputs), ctx.group, stress=cfg)
        same &= first is not None and digest(again) == first
    return same


def whole_layer(ctx: RunContext) -> dict:
    inputs = ctx.inputs(ctx.rank)
    got = ctx.kernel_call(ctx.spec.fused, _clone(inputs), ctx.group)
    eager = ctx.spec.golden(_clone(inputs), ctx.group)
    gold = ctx.spec.golden(_to(inputs, torch.float64), ctx.group)
    bad = _golden_contract(ctx, "golden", "whole", eager, gold)
    if bad is not None:   # every rank ran the same golden: all return here, no collective left unmatched
        return _result(ctx, "whole", bad, digest=digest(got), replayed_same_bits=None)
    cmp = compare(got, eager, gold, policy=ctx.policy, name="whole")
    # the golden runs collectives: every rank learns whether any needs the composition's noise, and all re-run
    if _any_rank(ctx, reference.needs_noise(cmp), "eager's noise"):
        reruns = []
        for label, mode in reference.compositions(eager.dtype if isinstance(eager, torch.Tensor) else ctx.dtype,
                                                  False):
            with mode:
                reruns.append((label, ctx.spec.golden(_clone(inputs), ctx.group)))
        if reference.needs_noise(cmp):
            cmp = reference.rejudge(got, eager, gold, reruns, ctx.policy, "whole", cmp)
    replayed = replay(ctx, inputs, got) if _any_rank(ctx, not cmp.passed, "a replay") else None
    return _result(ctx, "whole", cmp, digest=digest(got), replayed_same_bits=replayed)


def _golden_contract(ctx: RunContext, method: str, name: str, eager, gold):
    """The spec's own reference must return a tensor in the op dtype and in fp64; otherwise the comparison
    would blame the kernel (a type mismatch reads as fused() returning the wrong type)."""
    for what, value in (("the op dtype", eager), ("fp64", gold)):
        if not isinstance(value, torch.Tensor):
            return input_error(name, "golden_type", f"{type(ctx.spec).__name__}.{method}() returned "
                               f"{type(value).__name__} in {what}, not a tensor: the spec's reference is broken")
    return None


def _any_rank(ctx: RunContext, flag: bool, on: str) -> bool:
    """Whether any rank's flag is set (an all_reduce on the group), announced as a phase of its own (`on`: what
    the ranks agree on)."""
    if ctx.on_phase is not None:
        ctx.on_phase(f"{ctx.label} (ranks agree on {on})")
    t = torch.tensor([float(flag)], device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.group)
    return bool(t.item())


def digest(t) -> str | None:
    """Hash of a tensor's bits (cross-rank agreement, run-to-run determinism)."""
    if not isinstance(t, torch.Tensor):
        return None
    raw = t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
    return hashlib.sha1(raw + str(tuple(t.shape)).encode()).hexdigest()
