"""The core check: eager (twice), compiled (twice) and golden side by side, judged output by output.

Data flows one way: prepare case -> capture+compile -> run eager/compiled/golden -> compare -> report.
The repeat runs are kept as bit digests, the golden is streamed block by block when the model has blocks
(fusecheck/streamed/), and each gradient row is judged as soon as its golden exists: a check holds the model,
eager's and compiled's results, and one fp64 block, never a whole fp64 copy of the model.
"""
from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch.utils._python_dispatch import _disable_current_modes

from fusecheck.backends import Backend, resolve_backend
from fusecheck.capture import CapturedGraph, GraphCapture
from fusecheck.case import Case, TargetError
from fusecheck.compare import Comparison, Status, input_error
from fusecheck.decisions.follow import Recorder
from fusecheck.decisions.passes import golden_passes
from fusecheck.decisions.tap import decision_nodes
from fusecheck.devices import resolve_device, resolve_dtype
from fusecheck.digest import digest
from fusecheck.execute import RunResult, module_tensors, rng_changed, rng_states, run_once, state_snapshot
from fusecheck.golden import prepare_case
from fusecheck.golden_fallback import GoldenError, GoldenFallback
from fusecheck.golden_runs import GOLDEN_MODES, GoldenRequest
from fusecheck.memory import MemoryLog, OutOfMemory, is_oom, oom_message
from fusecheck.passes import toggled
from fusecheck.passes.census import collecting_census
from fusecheck.policy import Policy
from fusecheck.precision_notes import eager_precision_notes, pinned_fp32, pinned_note
from fusecheck.compare.noise_band import eager_spread
from fusecheck.rows import RowJudge
from fusecheck.settle import NOISE_BAND_RUNS, settle
from fusecheck.streamed.per_block import BlockRecorder, BlockVerdict, first_worse, judge_blocks, replay_compiled
from fusecheck.streamed.plan import BlockPlan, make_plan
from fusecheck.watchdog import phase


class CompileError(RuntimeError):
    """The backend failed to compile or run the target (exit code 3: a tool/compiler error, not a verdict)."""


@dataclass
class CheckReport:
    case: str
    backend: str
    dtype: str
    device: str
    train: bool
    seed: int
    policy: Policy
    rows: list[Comparison]
    graphs: list[CapturedGraph]
    notes: list[str] = field(default_factory=list)
    toggles: tuple[str, ...] = ()
    census: Any = None
    eager_repeatable: bool = True
    compiled_repeatable: bool = True
    movement_only: bool = False
    seconds: dict[str, float] = field(default_factory=dict)
    golden_mode: str = "whole"     # how the golden ran: "whole" or "streamed (...)"
    regional: bool = False
    blocks: list[BlockVerdict] = field(default_factory=list)
    memory: dict[str, dict[str, int]] = field(default_factory=dict)
    model_bytes: int = 0           # parameters and buffers in the run dtype: the yardstick for `memory`

    @property
    def first_worse_block(self) -> str | None:
        return first_worse(self.blocks)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rows)

    @property
    def exit_code(self) -> int:
        if any(r.verdict.status is Status.ERROR for r in self.rows):
            return 2
        return 0 if self.passed else 1

    @property
    def status(self) -> str:
        return {0: "PASS", 1: "FAIL", 2: "ERROR"}[self.exit_code]

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case, "backend": self.backend, "dtype": self.dtype, "device": self.device,
            "train": self.train, "seed": self.seed, "status": self.status, "exit_code": self.exit_code,
            "toggles": list(self.toggles), "eager_repeatable": self.eager_repeatable,
            "compiled_repeatable": self.compiled_repeatable, "movement_only": self.movement_only,
            "notes": list(self.notes), "policy": self.policy.to_dict(),
            "graphs": [g.to_dict() for g in self.graphs], "rows": [r.to_dict() for r in self.rows],
            "census": self.census.to_dict() if self.census is not None and hasattr(self.census, "to_dict") else None,
            "seconds": self.seconds, "golden_mode": self.golden_mode, "regional": self.regional,
            "blocks": [b.to_dict() for b in self.blocks], "first_worse_block": self.first_worse_block,
            "memory": self.memory, "model_bytes": self.model_bytes,
        }


def _toggle_contexts(toggles: Sequence[str], backend: Backend, stack: contextlib.ExitStack):
    """Enter the toggles and, for Inductor, the kernel census. Returns the census."""
    if toggles and not backend.is_inductor:
        raise TargetError(f"toggles {list(toggles)} act on Inductor; backend {backend.name!r} is not Inductor")
    stack.enter_context(toggled(list(toggles)))
    return stack.enter_context(collecting_census()) if backend.is_inductor else None


def _differing(first: RunResult, again: RunResult, extra: tuple[str, ...] = ()) -> set[str]:
    """Names of the results of `first` (outputs, gradients, `extra` mutated state) whose bits differ in the
    repeat run `again` (kept as digests)."""
    return {k for k, v in first.all(extra).items() if again.digests.get(k) != digest(v)}


GOLDEN_CHOICES = ("auto", "streamed", "whole")


def _bytes(model) -> int:
    """Parameters and buffers, each shared tensor once."""
    return sum(t.numel() * t.element_size() for t in {id(t): t for t in module_tensors(model).values()}.values())


@contextlib.contextmanager
def _measured(name: str, mem: MemoryLog, timings: dict[str, float], device: torch.device):
    """A phase: its time and peak memory recorded, an out-of-memory turned into one actionable error."""
    t = time.perf_counter()
    try:
        with mem.phase(name):
            yield
    except Exception as exc:
        if is_oom(exc):
            raise OutOfMemory(oom_message(name, exc, device)) from None
        raise
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t


def _rerun(fn, prepared: Case, names: set[str], measured, label: str, **kw) -> dict[str, torch.Tensor]:
    """A third run, kept in full for `names` only (results whose repeat digests differed)."""
    if not names:
        return {}
    with measured(f"{label} repeat") if measured is not None else contextlib.nullcontext():
        again = run_once(fn, prepared, **kw)
        return {k: v for k, v in again.all(tuple(again.after)).items() if k in names}


def _outside_modes(fn):
    """The sink judges rows while the golden runs (inside GoldenFallback's dispatch mode): the comparison's
    own ops must not go through that Python mode, one op at a time."""
    def call(*args):
        with _disable_current_modes():
            return fn(*args)
    return call


def _plan_for(prepared: Case, golden: str, blocks: str | None, regional: bool) -> BlockPlan | None:
    if golden not in GOLDEN_CHOICES:
        raise TargetError(f"unknown golden mode {golden!r}; known: {', '.join(GOLDEN_CHOICES)}")
    if not isinstance(prepared.model, torch.nn.Module):
        if golden == "streamed" or blocks or regional:
            raise TargetError("--golden streamed, --blocks and --regional need an nn.Module target")
        return None
    plan = make_plan(prepared.model, blocks) if golden != "whole" or regional else None
    if plan is None and (golden == "streamed" or regional):
        raise TargetError(f"{'--regional' if regional else '--golden streamed'} needs blocks, and "
                          f"{prepared.name!r} has no nn.ModuleList of two or more children: name them with "
                          "--blocks 'GLOB'")
    return plan


def run_check(case: Case, *, backend: str = "inductor", dtype: str | torch.dtype | None = None,
              device: str = "cpu", train: bool = False, policy: Policy | None = None,
              toggles: Sequence[str] = (), seed: int = 0, golden: str = "auto", blocks: str | None = None,
              regional: bool = False, golden_device: str | None = None, block_verdicts: bool = True,
              tf32: bool = False) -> CheckReport:
    """Check `case` compiled with `backend` against eager and the golden. Raises TargetError on bad input
    (exit 2), CompileError when the backend fails and OutOfMemory (exit 3); otherwise returns a report.

    `golden`: "auto" streams the golden block by block when the model has blocks (`blocks` is a glob of
    module names; default: the children of the largest nn.ModuleList), else copies the whole model;
    "streamed"/"whole" force one. `regional` compiles each block on its own (what LLM users do), which
    makes compiled blocks observable per block. `golden_device` runs the golden elsewhere (the host).
    `tf32` keeps the process's TF32 flags on CUDA; by default eager and compiled run fp32 without TF32.
    """
    with pinned_fp32(device, keep=tf32):
        report = _run_check(case, backend=backend, dtype=dtype, device=device, train=train, policy=policy,
                            toggles=toggles, seed=seed, golden=golden, blocks=blocks, regional=regional,
                            golden_device=golden_device, block_verdicts=block_verdicts)
    report.notes += pinned_note(device, report_dtype(dtype), tf32)
    return report


def report_dtype(dtype) -> torch.dtype | None:
    return resolve_dtype(dtype) if isinstance(dtype, str) or dtype is None else dtype


def _run_check(case: Case, *, backend, dtype, device, train, policy, toggles, seed, golden, blocks, regional,
               golden_device, block_verdicts) -> CheckReport:
    policy = policy or Policy()
    dev = resolve_device(device)
    if golden_device:
        resolve_device(golden_device)  # an unknown or missing device: one line, exit 2
    gdev = torch.device(golden_device or device)
    run_dtype = report_dtype(dtype)
    be = resolve_backend(backend)
    prepared = prepare_case(case, run_dtype, device)
    plan = _plan_for(prepared, golden, blocks, regional)
    timings: dict[str, float] = {}
    mem = MemoryLog(torch.device(device))
    measured = functools.partial(_measured, mem=mem, timings=timings, device=torch.device(device))
    recorder = BlockRecorder(plan.blocks) if plan is not None and block_verdicts else None

    torch.manual_seed(seed)
    phase(f"running {case.name!r} in eager mode")
    with measured("eager"):
        try:
            state = state_snapshot(prepared)  # every run starts from this module state and fresh input copies
            rng_before = rng_states(device)
            with recorder or contextlib.nullcontext():
                eager = run_once(prepared.model, prepared, train=train, seed=seed, state=state)
            drew = rng_changed(rng_before, rng_states(device))
            eager2 = run_once(prepared.model, prepared, train=train, cotangents=eager.cotangents, state=state,
                              digests_only=True)
        except TargetError:
            raise
        except Exception as exc:
            if is_oom(exc):
                raise
            raise TargetError(f"the target {case.name!r} fails in eager mode: {type(exc).__name__}: {exc}") from exc
    if drew and _differing(eager, eager2):
        # a forward that reseeds itself (torch.manual_seed inside) also moves the RNG, but repeats itself
        raise TargetError(f"the target {case.name!r} draws random numbers in its forward or backward (the RNG "
                          "advanced during the eager run and two eager runs differ): eager, compiled and golden "
                          "would draw different numbers, so no element-wise verdict is possible. Pass the noise "
                          "in as an input, or turn the random op off (dropout p=0)")
    cotangents = eager.cotangents
    # Nondeterminism is rare: only then is a run repeated in full, to judge both runs and count elements.
    eager_noisy = _differing(eager, eager2, eager.mutated)
    eager_again = _rerun(prepared.model, prepared, eager_noisy, measured, "eager", train=train, cotangents=cotangents,
                         state=state)

    torch._dynamo.reset()
    capture = GraphCapture(be.make(), decisions=None if be.user else [])
    if regional:
        for _, block in plan.blocks:
            block.compile(backend=capture)
        compiled_fn = prepared.model
    else:
        compiled_fn = torch.compile(prepared.model, backend=capture)
    phase(f"compiling and running {case.name!r} with backend {be.name!r}")
    with measured("compiled"), contextlib.ExitStack() as stack:
        census = _toggle_contexts(toggles, be, stack)
        try:
            compiled = run_once(compiled_fn, prepared, train=train, cotangents=cotangents, state=state)
            compiled_choices = list(capture.decisions or ())
            # every compiled run is judged: the second keeps in full what differs from the first (a race
            # that hits only the second call is compared with the golden like the first run)
            first = {k: digest(v) for k, v in compiled.all(compiled.mutated).items()}
            compiled2 = run_once(compiled_fn, prepared, train=train, cotangents=cotangents, state=state,
                                 digests_only=True, differs_from=first)
            compiled_noisy = {k for k, d in first.items() if compiled2.digests.get(k) != d}
            compiled_again = {k: v for k, v in compiled2.differing.items() if k in compiled_noisy}
            compiled_again.update(_rerun(compiled_fn, prepared, compiled_noisy & set(compiled2.lost), None,
                                         "compiled", train=train, cotangents=cotangents, state=state))
            del compiled2
            if regional and recorder is not None:
                replay_compiled(recorder, train)
        except (TargetError, OutOfMemory):
            raise
        except Exception as exc:
            if is_oom(exc):
                raise
            raise CompileError(f"backend {be.name!r} failed on {case.name!r}: {type(exc).__name__}: {exc}") from exc
        finally:
            for _, block in (plan.blocks if regional else ()):
                block._compiled_call_impl = None  # the golden and the block replays run the eager blocks
    torch._dynamo.reset()
    choices, decision_notes = Recorder(), []
    if compiled_choices:  # the compiled graphs decide (topk routing...): eager's choices, from one more run
        # (not recorded in the first run: a dispatch mode there would change how eager runs torch.cond)
        try:
            with measured("eager"), choices:
                run_once(prepared.model, prepared, train=train, cotangents=cotangents, state=state,
                         digests_only=True)
        except OutOfMemory:
            raise
        except Exception as exc:  # e.g. an op that refuses Python dispatch modes: judge without following
            choices.calls.clear()
            decision_notes.append(f"decisions: eager's choices could not be recorded ({type(exc).__name__}: "
                                  f"{str(exc)[:120]}); the golden keeps its own")

    # In-place updates of inputs or buffers are results too: judged like outputs when eager or compiled made any.
    mutated = tuple(sorted(set(eager.mutated) | set(compiled.mutated)))
    judge = RowJudge(eager.all(mutated), compiled.all(mutated), policy, exact=capture.movement_only,
                     eager_noisy=eager_noisy, compiled_noisy=compiled_noisy, eager_again=eager_again,
                     compiled_again=compiled_again)
    eager_keys, compiled_keys = list(eager.all(mutated)), set(compiled.all(mutated))
    del eager, compiled

    mode = "streamed" if plan is not None and golden != "whole" and not any(
        k.startswith("mutated.state.") for k in mutated) else "whole"
    notes: list[str] = decision_notes
    if be.user and any(decision_nodes(g.gm) for g in capture.graphs):
        notes.append("decisions: a user backend receives the model's own graph (no decision taps), so where "
                     "it takes a discrete decision (topk, relu, max-pool...) at a near-tie the golden keeps its own")
    if capture.decisions:
        capture.decisions.clear()  # the repeat runs' choices: only the first run's are followed
    if plan is not None and golden != "whole" and mode == "whole":
        notes.append("the model updates its own state in place: the golden is a whole-model fp64 copy, whose "
                     "state is judged too")
    phase(f"running the {dev.golden_dtype} golden of {case.name!r} ({mode})")
    request = GoldenRequest(prepared, state, train, cotangents, dev.golden_dtype, gdev, mutated, plan)
    fallback = GoldenFallback(dev.golden_dtype)
    with measured("golden"):
        try:
            for follower, sink in golden_passes(choices.calls, compiled_choices, judge, policy.ratios.decision_tie):
                with fallback, follower:
                    GOLDEN_MODES[mode](request, _outside_modes(sink))
                notes += follower.report.notes()
        except (TargetError, OutOfMemory):
            raise
        except Exception as exc:
            if is_oom(exc):
                raise
            raise GoldenError(f"the {dev.golden_dtype} golden run of {case.name!r} failed where eager ran "
                              f"({mode} golden): {type(exc).__name__}: {exc}") from exc
    golden_mode = (f"streamed ({plan.describe()})" if mode == "streamed" and request.stepped_aside is None
                   else "whole")

    block_rows: list[BlockVerdict] = []
    if recorder is not None and recorder.calls:
        phase(f"judging each block of {case.name!r} on eager's input to it")
        with measured("blocks"), fallback:
            block_rows = judge_blocks(recorder, dev.golden_dtype, gdev, policy, model=prepared.model)
        del recorder
        if not regional:
            notes.append("per-block errors are eager's only: compiled blocks are observable per block with "
                         "--regional (one compile per block); the verdict is end to end")

    notes += request.notes + fallback.notes()
    notes += eager_precision_notes(device, run_dtype)
    if dev.golden_dtype != torch.float64:
        notes.append(f"golden runs in {dev.golden_dtype} on {device}: the device has no fp64")
    if eager2.skipped:
        notes.append(f"not compared: {', '.join(eager2.skipped)} hold tensors but are neither tensors, pytree "
                     "containers nor dataclasses; return their tensors to have them judged")
    if not capture.graphs:
        notes.append("the backend was never called: dynamo captured no graph, compiled ran eagerly")
    elif len(capture.graphs) > 1:
        notes.append(f"{len(capture.graphs)} graphs captured (graph breaks"
                     f"{'; one per block with --regional' if regional else ''})")
    exact = capture.movement_only
    if exact:
        notes.append("every captured graph is pure data movement: forward outputs must be bitwise equal to eager")
    if mutated:
        notes.append(f"the model mutates {', '.join(k.removeprefix('mutated.') for k in mutated)}: "
                     "the values after the call are judged too")

    phase(f"comparing the outputs of {case.name!r}")
    with measured("compare"):
        for name in list(judge.eager):  # results the golden did not produce are judged without it
            judge.judge(name, None)
    if judge.doubtful:  # rows only the per-element checks failed: settled by eager's own noise band
        phase(f"measuring eager's per-element noise band on {len(judge.doubtful)} row(s) of {case.name!r}")
        doubt_eager = {n: d.eager for n, d in judge.doubtful.items()}
        with measured("noise band"):
            notes += settle(judge, lambda names: eager_spread(
                prepared.model, prepared, runs=NOISE_BAND_RUNS, train=train, cotangents=cotangents, state=state,
                names=names, seed=seed, eager=doubt_eager))
    rows = [judge.rows[name] for name in eager_keys if name in judge.rows]
    for name in sorted(compiled_keys - set(eager_keys)):
        rows.append(input_error(name, "structure_mismatch", f"compiled produced {name}, eager did not"))
    notes.extend(r.describe() for r in policy.relaxations)

    own = next((r.dtype for r in rows if r.name.startswith("output") and r.dtype.startswith(("float", "bfloat"))), None)
    shown = str(run_dtype) if run_dtype else f"{own or 'none'} (the model's own)"
    return CheckReport(case.name, be.name, shown.replace("torch.", ""), device, train,
                       seed, policy, rows, capture.graphs, notes, tuple(toggles), census,
                       eager_repeatable=not judge.eager_noisy,
                       compiled_repeatable=not compiled_noisy,
                       movement_only=exact, seconds=timings, golden_mode=golden_mode, regional=regional,
                       blocks=block_rows, memory=mem.to_dict(),
                       model_bytes=_bytes(prepared.model))
