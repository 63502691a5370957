"""`run_check`: the check in one process. Data flows one way: prepare case -> eager x2 -> compiled x2 ->
golden (whole copy or streamed block by block) -> per-block replays -> judge -> report.

The repeat runs are kept as bit digests, the golden is streamed block by block when the model has blocks
(fusecheck/golden/streamed/), and each gradient row is judged as soon as its golden exists: a check holds the model,
eager's and compiled's results, and one fp64 block, never a whole fp64 copy of the model.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from fusecheck.backends import resolve_backend
from fusecheck.case import Case
from fusecheck.check.compiled import other_inputs, run_compiled, whole_model
from fusecheck.check.eager import run_eager
from fusecheck.check.golden import run_blocks, run_golden
from fusecheck.check.judge import capture_notes, finish, mutated_keys, row_judge, run_notes
from fusecheck.check.options import GOLDEN_CHOICES, CheckOptions
from fusecheck.check.pipeline import Pipeline
from fusecheck.check.report import CheckReport
from fusecheck.compare.noise_band import eager_spread
from fusecheck.devices import resolve_device, resolve_dtype
from fusecheck.errors import TargetError
from fusecheck.runs.attributes import opaque_attributes
from fusecheck.runs.execute import module_tensors, run_once, state_snapshot
from fusecheck.runs.cast import prepare_case
from fusecheck.golden.choose import choose as choose_golden, floating_dtype
from fusecheck.golden.modes import GOLDEN_MODES, GoldenRequest
from fusecheck.toggles import not_applying, toggled
from fusecheck.toggles.census import collecting_census
from fusecheck.policy import Policy
from fusecheck.check.precision_notes import pinned_fp32, pinned_note
from fusecheck.check.signature import model_signature
from fusecheck.check.rolled import ROLLED_NOISE_RUNS, settle_rolled
from fusecheck.check.settle import settle
from fusecheck.golden.streamed.per_block import BlockRecorder, judge_blocks, replay_compiled
from fusecheck.golden.streamed.plan import NO_STACK, BlockPlan, make_plan
from fusecheck.cli.watchdog import phase


def run_check(case: Case, options: CheckOptions | None = None, **fields: Any) -> CheckReport:
    """Check `case` compiled with `options.backend` against eager and the golden (`fields` are CheckOptions
    fields, for `run_check(case, backend="aot_eager", dtype="bf16")`). Raises TargetError on bad input
    (exit 2), CompileError when the backend fails and OutOfMemory (exit 3); otherwise returns a report."""
    opts = options.replace(**fields) if options is not None else CheckOptions(**fields)
    with pinned_fp32(opts.device, keep=opts.tf32):
        report = _check(case, opts)
    report.notes += pinned_note(opts.device, report_dtype(opts.dtype), opts.tf32)
    return report


def report_dtype(dtype) -> torch.dtype | None:
    return resolve_dtype(dtype) if isinstance(dtype, str) or dtype is None else dtype


def model_bytes(model, trained: bool = False) -> int:
    """Parameters and buffers, each shared tensor once (`trained`: only the parameters that take gradients)."""
    tensors = {id(t): t for t in (model.parameters() if trained else module_tensors(model).values())
               if not trained or t.requires_grad}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def plan_for(prepared: Case, opts: CheckOptions) -> BlockPlan | None:
    golden, regional = opts.golden, opts.regional
    if golden not in GOLDEN_CHOICES:
        raise TargetError(f"unknown golden mode {golden!r}; known: {', '.join(GOLDEN_CHOICES)}")
    if not isinstance(prepared.model, torch.nn.Module):
        if golden == "streamed" or opts.blocks or regional:
            raise TargetError("--golden streamed, --blocks and --regional need an nn.Module target")
        return None
    plan = make_plan(prepared.model, opts.blocks) if golden != "whole" or regional else None
    if plan is None and (golden == "streamed" or regional):
        raise TargetError(f"{'--regional' if regional else '--golden streamed'} needs blocks, and "
                          f"{prepared.name!r} has {NO_STACK}: name them with --blocks 'GLOB'")
    return plan


def _toggles(opts: CheckOptions, backend):
    def setup(stack: contextlib.ExitStack):
        """Enter the toggles and, for Inductor, the kernel census. Returns the census."""
        stack.enter_context(toggled(list(opts.toggles)))
        return stack.enter_context(collecting_census()) if backend.is_inductor else None
    return setup


def _check(case: Case, opts: CheckOptions) -> CheckReport:
    policy = opts.policy or Policy()
    dev = resolve_device(opts.device)
    if opts.golden_device:
        resolve_device(opts.golden_device)  # an unknown or missing device: one line, exit 2
    run_dtype = report_dtype(opts.dtype)
    be = resolve_backend(opts.backend)
    if opts.toggles and not be.is_inductor:
        raise TargetError(f"toggles {list(opts.toggles)} act on Inductor; backend {be.name!r} is not Inductor")
    prepared = prepare_case(case, run_dtype, opts.device)
    plan = plan_for(prepared, opts)
    state = []

    def run(fn, case=None, **kw):
        return run_once(fn, case or prepared, train=opts.train, seed=opts.seed, state=state[0], **kw)
    p = Pipeline(prepared, opts, policy, be, torch.device(opts.device), dev.golden_dtype,
                 torch.device(opts.golden_device or opts.device), run)
    recorder = BlockRecorder(plan.blocks) if plan is not None and opts.block_verdicts else None
    with p.measured("eager"):
        state.append(state_snapshot(prepared))  # every run starts from this module state and fresh input copies
    opaque = opaque_attributes(prepared.model)
    if opaque:
        p.notes.append(f"not reset between runs nor judged: {', '.join(opaque)}: objects holding tensors kept on "
                       "the model (module state fusecheck can neither copy nor put back; a tensor, a list or "
                       "dict of tensors, or a buffer would be)")
    eager = run_eager(p, recorder)

    regional = opts.regional
    compiled = run_compiled(
        p, eager, _regional_model(plan, prepared) if regional else whole_model(prepared.model),
        setup=_toggles(opts, be), after=(lambda: replay_compiled(recorder, opts.train)) if regional and recorder is not None else None)

    mutated = mutated_keys(eager, compiled)
    judge = row_judge(p, eager, compiled)
    eager_keys, compiled_keys = list(judge.eager), set(judge.compiled)
    cotangents = eager.first.cotangents
    eager.first = compiled.first = None  # the judge holds what is left to judge, and releases it row by row

    mutates_state = any(k.startswith("mutated.state.") for k in mutated)
    mode = "streamed" if plan is not None and opts.golden != "whole" and not mutates_state else "whole"
    if mode == "streamed" and opts.golden == "auto" and not opts.regional:
        choice = choose_golden(model_bytes(prepared.model), p.mem.peaks.get("eager", {}),
                               floating_dtype(prepared.model, run_dtype), p.golden_dtype, p.golden_device,
                               grad_bytes=model_bytes(prepared.model, trained=True) if opts.train else 0)
        mode = choice.mode
        p.notes.append(choice.why)
    p.notes += capture_notes(p, compiled)
    if opts.toggles:  # a toggle that cannot act on this run (no_recompute without --train) is said, not silent
        p.notes += not_applying(opts.toggles, [g.gm for g in compiled.capture.graphs], train=opts.train)
    if plan is not None and opts.golden != "whole" and mutates_state:
        p.notes.append("the model updates its own state in place: the golden is a whole-model fp64 copy, whose "
                       "state is judged too")
    request = GoldenRequest(prepared, state[0], opts.train, cotangents, p.golden_dtype, p.golden_device, mutated, plan)
    fallback = run_golden(p, judge, compiled, lambda sink: GOLDEN_MODES[mode](request, sink), mode)
    golden_mode = (f"streamed ({plan.describe()})" if mode == "streamed" and request.stepped_aside is None
                   else "whole")

    block_rows = run_blocks(p, recorder, fallback, lambda rec: judge_blocks(
        rec, p.golden_dtype, p.golden_device, policy, model=prepared.model))
    if block_rows and not regional:
        p.notes.append("per-block errors are eager's only: compiled blocks are observable per block with "
                       "--regional (one compile per block); the verdict is end to end")
    del recorder
    p.notes += request.notes + fallback.notes()
    p.notes += run_notes(p, eager, compiled, mutated, run_dtype)

    def settling(judge):  # rows failed on eager's one run: settled by eager's own randomised-rounding runs
        notes = []
        if judge.doubtful:
            phase(f"measuring eager's per-element noise band on {len(judge.doubtful)} row(s) of {p.name!r}")
            doubt_eager = {n: d.eager for n, d in judge.doubtful.items()}
            with p.measured("noise band"):
                notes += settle(judge, lambda names, runs, first: eager_spread(
                    prepared.model, prepared, runs=runs, first_run=first, train=opts.train, cotangents=cotangents,
                    state=state[0], names=names, seed=opts.seed, eager=doubt_eager))
        rolled = other_inputs(prepared) if judge.rolled_doubts else None
        if rolled is not None:  # the rolled call's runs made their cotangents from the seed: these do too
            phase(f"measuring eager's noise on the rolled inputs for {len(judge.rolled_doubts)} row(s)")
            with p.measured("noise band"):
                notes += settle_rolled(judge.rolled_doubts, judge.rows, policy, lambda names: eager_spread(
                    prepared.model, rolled, runs=ROLLED_NOISE_RUNS, train=opts.train, state=state[0],
                    names=names, seed=opts.seed))
        return notes
    rows = finish(p, judge, eager_keys, compiled_keys, settling)
    p.notes.extend(r.describe() for r in policy.relaxations)

    own = next((r.dtype for r in rows if r.name.startswith("output") and r.dtype.startswith(("float", "bfloat"))), None)
    shown = str(run_dtype) if run_dtype else f"{own or 'none'} (the model's own)"
    return CheckReport(case.name, be.name, shown.replace("torch.", ""), opts.device, opts.train,
                       opts.seed, policy, rows, compiled.capture.graphs, p.notes, opts.toggles, compiled.census,
                       eager_repeatable=not judge.eager_noisy, compiled_repeatable=not compiled.noisy,
                       movement_only=compiled.capture.movement_only, seconds=p.timings, golden_mode=golden_mode,
                       regional=regional, blocks=block_rows, memory=p.mem.to_dict(),
                       model_bytes=model_bytes(prepared.model), model_signature=model_signature(prepared))


def _regional_model(plan: BlockPlan, prepared: Case):
    @contextlib.contextmanager
    def compiling(capture):
        for _, block in plan.blocks:
            block.compile(backend=capture)
        try:
            yield prepared.model
        finally:
            for _, block in plan.blocks:
                block._compiled_call_impl = None  # the golden and the block replays run the eager blocks
    return compiling
