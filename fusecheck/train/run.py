"""The training check: eager, compiled, K band runs and the fp64 shadow, N steps in lockstep, judged per step.

Data flows one way: prepare the case (op dtype, eval mode) and the shadow (an fp64 copy of the *prepared*
model, so every trajectory starts from the same rounded weights) -> each step: one batch, every trajectory
steps once -> judge.py judges the loss and every parameter -> report. Trajectories run in lockstep so that only
the current step's tensors are held: memory is one op-dtype model, per trajectory its fp32 masters and
optimizer state, and the shadow's fp64 parameters and state (on `golden_device` when given).
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from fusecheck.backends import resolve_backend
from fusecheck.case import Case, TargetError
from fusecheck.compare.noise_band import RandomRounding
from fusecheck.compare.noise_band.spread import perturbed_run_seed
from fusecheck.devices import resolve_device, resolve_dtype
from fusecheck.runs.cast import cast_tree, golden_case, prepare_case
from fusecheck.golden.fallback import GoldenError, GoldenFallback, eager_precision
from fusecheck.runs.memory import MemoryLog, OutOfMemory, is_oom, oom_message
from fusecheck.policy import Policy
from fusecheck.check import CompileError
from fusecheck.cli.progress import step as progress_step
from fusecheck.train.data import stream_for
from fusecheck.train.groups import parameter_groups
from fusecheck.train.judge import StepResult, judge_quantity
from fusecheck.train.optimizers import OPTIMIZERS
from fusecheck.train.trajectory import Trajectory
from fusecheck.cli.watchdog import phase

BAND_RUNS = 8  # K: with eager, 9 draws of a correct run; a correct compiled scalar (the loss) beyond 3x all of
# them has probability 5e-4 per step (noise_band.null_tail(3, runs=8, ratio=1)), 0.6% at K = 4


@dataclass
class TrainReport:
    case: str
    backend: str
    dtype: str
    device: str
    optimizer: str
    lr: float
    steps: int
    seed: int
    band_runs: int
    policy: Policy
    results: list[StepResult]
    groups: dict[str, dict[str, list[str]]]
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    golden_device: str = ""
    compile_optimizer: bool = False

    @property
    def first_failed_step(self) -> int | None:
        return next((r.step for r in self.results if r.failed), None)

    @property
    def exit_code(self) -> int:
        if any(r.errors for r in self.results):
            return 2
        return 1 if self.first_failed_step is not None else 0

    @property
    def status(self) -> str:
        return {0: "PASS", 1: "FAIL", 2: "ERROR"}[self.exit_code]

    def left_band(self) -> list[str]:
        """The quantities that failed at the first failing step."""
        step = self.first_failed_step
        return [] if step is None else self.results[step].failed

    def to_dict(self) -> dict[str, Any]:
        from fusecheck.train.report import report_dict
        return report_dict(self)


def _master_dtype(model: torch.nn.Module) -> torch.dtype:
    """fp32 master weights for a bf16/fp16 model (mixed precision), the model's own dtype from fp32 up."""
    p = next(p for p in model.parameters() if p.requires_grad)
    return torch.promote_types(p.dtype, torch.float32)


def _state_bytes(traj: Trajectory) -> int:
    tensors = {id(t): t for t in traj.masters.values()}
    for state in traj.optimizer.state.values():
        tensors.update({id(v): v for v in state.values() if isinstance(v, torch.Tensor)})
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _band_seed(seed: int, k: int, step: int) -> int:
    return perturbed_run_seed(seed, k, step * 104_729)


@contextlib.contextmanager
def _failing_as(kind: type[Exception], what: str):
    """Exceptions of a trajectory, mapped: the user's input stays exit 2, an out-of-memory is one line."""
    try:
        yield
    except (TargetError, OutOfMemory):
        raise
    except Exception as exc:
        if is_oom(exc):
            raise OutOfMemory(oom_message(what, exc, torch.device("cpu"))) from None
        raise kind(f"{what}: {type(exc).__name__}: {exc}") from exc


def run_train(case: Case, *, spec: str | None = None, steps: int = 20, optimizer: str = "adamw",
              lr: float | None = None, dtype: str | None = None, backend: str = "inductor", device: str = "cpu",
              seed: int = 0, policy: Policy | None = None, band_runs: int = BAND_RUNS,
              golden_device: str | None = None, compile_optimizer: bool = False, blocks: str | None = None,
              on_step: Callable[[StepResult], None] | None = None) -> TrainReport:
    """Train `case` for `steps` optimizer steps as eager, compiled (`backend`; with `compile_optimizer` the
    optimizer step too), `band_runs` randomised-rounding eager runs and an fp64 shadow; judge each step.
    Raises TargetError on bad input (exit 2), CompileError / GoldenError / OutOfMemory (exit 3)."""
    policy = policy or Policy()
    if steps < 1:
        raise TargetError(f"--steps {steps}: train at least one step")
    if band_runs < 1:
        raise TargetError(f"--band-runs {band_runs}: the band needs at least one randomised-rounding run")
    if optimizer not in OPTIMIZERS:
        raise TargetError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    kind = OPTIMIZERS[optimizer]
    lr = kind.lr if lr is None else float(lr)
    if not math.isfinite(lr) or lr <= 0:
        raise TargetError(f"--lr {lr}: a learning rate is a positive number")
    dev = resolve_device(device)
    if golden_device:
        resolve_device(golden_device)
    gdev = torch.device(golden_device or device)
    be = resolve_backend(backend)
    if not isinstance(case.model, torch.nn.Module) or not any(p.requires_grad for p in case.model.parameters()):
        raise TargetError(f"case {case.name!r}: train needs an nn.Module with trainable parameters")
    prepared = prepare_case(case, resolve_dtype(dtype), device)
    model = prepared.model
    master = _master_dtype(model)
    stream = stream_for(case, spec, seed)
    fallback = GoldenFallback(dev.golden_dtype, run=eager_precision(prepared, resolve_dtype(dtype)))
    shadow_model = golden_case(prepared, dev.golden_dtype, gdev).model

    eager = Trajectory("eager", model, master, kind, lr)
    compiled = Trajectory("compiled", model, master, kind, lr)
    band = [Trajectory(f"band{k}", model, master, kind, lr) for k in range(band_runs)]
    shadow = Trajectory("shadow", shadow_model, dev.golden_dtype, kind, lr, own_model=True)
    torch._dynamo.reset()
    compiled_fn = torch.compile(model, backend=be.make())
    if compile_optimizer:
        compiled.update = torch.compile(lambda: compiled.optimizer.step(), backend=be.make())
    names = list(eager.masters)
    groups = parameter_groups(model, names, blocks)
    run_dtype = next(iter(eager.params.values())).dtype
    timings: dict[str, float] = {}
    mem = MemoryLog(torch.device(device))

    def timed(what: str):
        @contextlib.contextmanager
        def cm():
            t = time.perf_counter()
            try:
                yield
            finally:
                timings[what] = timings.get(what, 0.0) + time.perf_counter() - t
        return cm()

    results: list[StepResult] = []
    with mem.phase("train"):
        for t in range(steps):
            phase(f"step {t + 1}/{steps} of {case.name!r}")
            progress_step(t + 1, steps, "steps")
            raw = stream.inputs(t)
            batch = cast_tree(raw, run_dtype, device)
            with timed("eager"), _failing_as(TargetError, f"the target {case.name!r} fails in eager at step {t}"):
                loss_e = eager.step(model, stream, t, batch, master)
            if not bool(torch.isfinite(loss_e)):
                raise TargetError(f"eager's loss is {float(loss_e)} at step {t} of {case.name!r}: the training "
                                  f"itself diverges (a smaller --lr, or another target); nothing to judge")
            with timed("compiled"), _failing_as(CompileError, f"backend {be.name!r} failed on {case.name!r} at step {t}"):
                loss_c = compiled.step(compiled_fn, stream, t, batch, master)
            with timed("band"), _failing_as(TargetError, f"a randomised-rounding eager run of {case.name!r} failed at step {t}"):
                loss_b = [b.step(model, stream, t, batch, master, ctx=RandomRounding(_band_seed(seed, k, t)))
                          for k, b in enumerate(band)]
            with timed("shadow"), _failing_as(GoldenError, f"the {dev.golden_dtype} shadow of {case.name!r} failed at step {t}"):
                loss_s = _shadow_step(shadow, shadow_model, stream, t, cast_tree(raw, dev.golden_dtype, gdev),
                                      dev.golden_dtype, fallback)
            with timed("judge"):
                result = judge_step(t, eager, compiled, band, shadow, loss_e, loss_c, loss_b, loss_s, policy, groups)
            results.append(result)
            if on_step is not None:
                on_step(result)
    torch._dynamo.reset()

    notes = [stream.source, f"band: eager and {band_runs} randomised-rounding eager trajectories (every op's "
             "fp16/bf16/fp32 output randomly rounded, fp32 reductions reassociated, forward, backward and "
             "optimizer step); compiled is judged against the worst of them, metric by metric"]
    if master != run_dtype:
        notes.append(f"eager, compiled and the band keep {str(master).removeprefix('torch.')} master weights and "
                     f"optimizer state; the model computes in {str(run_dtype).removeprefix('torch.')}")
    if dev.golden_dtype != torch.float64:
        notes.append(f"the shadow runs in {dev.golden_dtype} on {device}: the device has no fp64")
    notes += fallback.notes()
    notes.extend(r.describe() for r in policy.relaxations)
    memory = {"peaks": mem.to_dict(), "state_bytes": {
        "eager": _state_bytes(eager), "compiled": _state_bytes(compiled),
        "band (each)": _state_bytes(band[0]), "shadow": _state_bytes(shadow)},
        "model_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}
    return TrainReport(case.name, be.name, str(run_dtype).removeprefix("torch."), device, optimizer, lr, steps,
                       seed, band_runs, policy, results, groups, notes, timings, memory, str(gdev),
                       compile_optimizer)


def _shadow_step(shadow: Trajectory, model, stream, t: int, batch, dtype: torch.dtype, fallback: GoldenFallback):
    """The shadow's step under the golden's dispatch mode. The same safety net as the check's golden
    (fusecheck/check/golden.py): where the shadow fails with the model's casts kept, before any shadow step
    was taken, it stands the casts down and takes the step again with them as written (a failed step changed
    no parameter: the update comes after the backward); the report's notes say so."""
    try:
        return shadow.step(model, stream, t, batch, dtype, ctx=fallback)
    except Exception as exc:
        if not fallback.kept or shadow.losses or isinstance(exc, (TargetError, OutOfMemory)) or is_oom(exc):
            raise
        fallback.stand_down("the shadow", exc)
        return shadow.step(model, stream, t, batch, dtype, ctx=fallback)


def judge_step(t: int, eager: Trajectory, compiled: Trajectory, band: list[Trajectory], shadow: Trajectory,
               loss_e, loss_c, loss_b, loss_s, policy: Policy, groups) -> StepResult:
    """The loss and every parameter (after this step's update) judged, and the groups' distances."""
    losses = {"eager": float(loss_e), "compiled": float(loss_c), "shadow": float(loss_s),
              "band_min": min(float(x) for x in loss_b), "band_max": max(float(x) for x in loss_b)}
    result = StepResult(t, losses)
    one = [x.reshape(1) for x in (loss_c, loss_e, loss_s)]
    result.judged["loss"] = judge_quantity("loss", *one, [x.reshape(1) for x in loss_b], policy)
    with torch.no_grad():
        for n in eager.masters:
            result.judged[f"param.{n}"] = judge_quantity(
                f"param.{n}", compiled.masters[n], eager.masters[n], shadow.masters[n],
                [b.masters[n] for b in band], policy)
    params = [f"param.{n}" for n in eager.masters]
    result.groups["model"] = {"all": {w: result.distance(params, w) for w in ("eager", "compiled", "band")}}
    for by, members in groups.items():
        result.groups[by] = {g: {w: result.distance([f"param.{n}" for n in ns], w)
                                 for w in ("eager", "compiled", "band")} for g, ns in members.items()}
    return result
