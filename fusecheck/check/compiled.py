"""Stage: compiled, twice, every run judged. The second run keeps in full what differs from the first (a
race that hits only the second call is compared with the golden like the first run), and a result it could
not keep (a gradient accumulated twice) is taken from a third run. On an accelerator the first run's large
results wait on the host from the repeat on, until the judge reaches them (fusecheck/runs/park.py). The
choices the compiled graphs made at discrete decisions (topk routing, masks) are read from their taps, and
eager's from one more eager run."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

import torch
from torch.utils import _pytree as pytree

from fusecheck.capture import GraphCapture
from fusecheck.case import Case
from fusecheck.check.eager import EagerRuns, rerun
from fusecheck.check.options import MIN_CALLS
from fusecheck.check.pipeline import Pipeline
from fusecheck.check.rolled import CALL, Ignoring, RolledScreen, RolledStats, ignoring_inputs
from fusecheck.check.rolled_choices import RolledChoices, judge_kept, recorded
from fusecheck.golden.choices.follow import Recorder
from fusecheck.golden.choices.ops import SELECTING_TAPS
from fusecheck.golden.choices.tap import decision_nodes
from fusecheck.runs.digest import digest
from fusecheck.errors import CompileError, NoTensorsReturned
from fusecheck.runs.execute import RunResult
from fusecheck.runs.park import park
from fusecheck.cli.watchdog import phase

# compiling(capture) -> a context that yields the compiled callable and undoes the compile on exit
Compiling = Callable[[GraphCapture], ContextManager[Any]]


@dataclass
class CompiledRuns:
    first: RunResult
    noisy: set[str]
    again: dict[str, torch.Tensor]
    capture: GraphCapture
    choices: list[torch.Tensor]        # the compiled graphs' decisions, first run
    census: Any = None
    eager_choices: Recorder = field(default_factory=Recorder)
    # first-run results waiting on the host, with the device each came from (runs/park.py)
    parked: dict[str, torch.device] = field(default_factory=dict)
    # which call a re-run in `again` was, where it was not the second (rows.py names it)
    again_call: dict[str, str] = field(default_factory=dict)
    # results whose compiled call on other inputs repeated the first call's bits while eager's moved beyond
    # tolerance, with the evidence (rows.py fails them)
    ignores_inputs: dict[str, Ignoring] = field(default_factory=dict)
    # the compiled call on other inputs against eager's on the same inputs (rows.py judges it: check/rolled.py)
    rolled: dict[str, RolledStats] = field(default_factory=dict)


def whole_model(model) -> Compiling:
    @contextlib.contextmanager
    def compiling(capture: GraphCapture):
        yield torch.compile(model, backend=capture)
    return compiling


def run_compiled(p: Pipeline, eager: EagerRuns, compiling: Compiling, *,
                 setup: Callable[[contextlib.ExitStack], Any] | None = None,
                 after: Callable[[], None] | None = None) -> CompiledRuns:
    """`setup(stack)`: enters what surrounds the compiled runs (the toggles) and returns the kernel census, if
    any; `after()`: more compiled work in the same phase (the per-block replays of regionally compiled blocks)."""
    cotangents = eager.first.cotangents
    torch._dynamo.reset()
    capture = GraphCapture(p.backend.make(), decisions=None if p.backend.user else [])
    breaks_before = dict(_graph_breaks())
    phase(f"compiling and running {p.name!r} with backend {p.backend.name!r}")
    with p.measured("compiled"), contextlib.ExitStack() as stack:
        census = setup(stack) if setup is not None else None
        try:
            with compiling(capture) as fn:
                compiled = p.run(fn, cotangents=cotangents)
                choices = list(capture.decisions or ())
                first = {k: digest(v) for k, v in compiled.all(compiled.mutated).items()}
                # the repeat run's gradients in the first run's memory; its results come back row by row to the judge
                on_host = park(compiled, p.device)
                compiled2 = p.run(fn, cotangents=cotangents, digests_only=True, differs_from=first)
                noisy = {k for k, d in first.items() if compiled2.digests.get(k) != d}
                again = {k: v for k, v in compiled2.differing.items() if k in noisy}
                again.update(rerun(p, fn, noisy & set(compiled2.lost), "compiled", cotangents, measured=False))
                del compiled2
                stale, again_call, ignoring, rolled = _after_other_inputs(p, fn, cotangents, first, capture, eager,
                                                                            compiled.all(compiled.mutated))
                again_call = {k: c for k, c in again_call.items() if k not in noisy}
                again.update({k: v for k, v in stale.items() if k not in again})
                noisy |= set(again_call)
                later_calls(p, fn, cotangents, first, again, again_call, noisy)
                if after is not None:
                    after()
        except Exception as exc:
            if isinstance(exc, NoTensorsReturned):
                # eager returned tensors (it ran first): what the compiled function returns is the backend's
                raise CompileError(f"backend {p.backend.name!r} on {p.name!r}: the compiled model returned no "
                                   f"tensors where eager did: {exc}") from exc
            if p.passes_through(exc) or isinstance(exc, CompileError):
                raise
            raise CompileError(f"backend {p.backend.name!r} failed on {p.name!r}: {_one_line(exc)}") from exc
    if not capture.graphs:
        raise CompileError(_nothing_compiled(p, breaks_before))
    torch._dynamo.reset()
    runs = CompiledRuns(compiled, noisy, again, capture, choices, census, parked=on_host, again_call=again_call,
                        ignores_inputs=ignoring, rolled=rolled)
    if capture.decisions:
        capture.decisions.clear()  # the repeat runs' choices: only the first run's are followed
    _record_eager_choices(p, runs, cotangents)
    return runs


AFTER_OTHER_INPUTS = "third (after a call on other inputs)"


def later_calls(p: Pipeline, fn, cotangents, first: dict, again: dict, again_call: dict[str, str],
                noisy: set) -> None:
    """Calls 5..--calls on the first inputs: a result whose digest differs from the first call's is kept in
    `again` (judged against the golden as the second call's would be) under its call's name, the first such
    call per result."""
    for call in range(MIN_CALLS + 1, p.opts.calls + 1):
        later = p.run(fn, cotangents=cotangents, digests_only=True, differs_from=first)
        moved = {k for k, d in first.items() if later.digests.get(k) != d} - noisy
        found = {k: v for k, v in later.differing.items() if k in moved}
        found.update(rerun(p, fn, moved & set(later.lost), "compiled", cotangents, measured=False))
        again.update(found)
        again_call.update({k: f"call {call} of {p.opts.calls}" for k in found})
        noisy |= moved
        del later


def other_inputs(case: Case) -> Case | None:
    """The case's tensors rolled by one along their last dimension of size > 1: the same values (token ids stay
    valid ids, masks stay masks), in another arrangement. None when no tensor can change so."""
    changed = False

    def roll(x):
        nonlocal changed
        if isinstance(x, torch.Tensor):
            dims = [d for d in range(x.dim() - 1, -1, -1) if x.shape[d] > 1]
            if dims:
                changed = True
                return torch.roll(x, 1, dims[0])
        return x
    out = Case(case.model, pytree.tree_map(roll, case.inputs), case.name, pytree.tree_map(roll, case.kwargs))
    return out if changed else None


def _after_other_inputs(p: Pipeline, fn, cotangents, first: dict, capture: GraphCapture, eager: EagerRuns,
                        compiled_first: dict) -> tuple[dict, dict[str, str], dict[str, str], dict[str, RolledStats]]:
    """A compiled call on other inputs, then the first inputs again: a compiled artifact that hands back an
    earlier call's results (a stale cache, a static buffer not refreshed) differs from the first run now,
    where two calls on the same inputs agree. Returns the results that differ (to be judged), their call
    names, the results that ignore their inputs, and the call on other inputs against eager's on the same
    inputs (check/rolled.py: that call is judged too). A target that cannot run on rolled inputs skips the
    probe, said in a note (its compiled runs on the first inputs are judged anyway); graphs compiled only for
    the rolled inputs are not the report's."""
    other = other_inputs(p.case)
    if other is None:
        return {}, {}, {}, {}
    graphs = len(capture.graphs)
    keys = tuple(eager.first.after)

    def eager_call() -> dict:
        # eager indeed: regionally compiled blocks (--regional, a sharded check) would otherwise run compiled
        with torch.compiler.set_stance("force_eager"):
            run = p.run(p.case.model, case=other, cotangents=None)
        park(run, p.device)
        return run.all(keys)
    try:
        screen = _rolled_screen(p, capture, capture.graphs[:graphs])
        # eager first where the rolled call is screened against it; else only if some result did not move
        eager_rolled = None
        if p.agree(screen.follows):  # its choices too, to be set against compiled's (check/rolled_choices.py)
            eager_rolled, eager_choices = recorded(eager_call)
            if screen.follows:
                screen.choices = RolledChoices(eager_choices, capture.decisions, len(capture.decisions))
        elif p.agree(screen.screens):
            eager_rolled = eager_call()
        screen.eager = (eager_rolled or {}) if screen.screens else {}  # a peer may screen where this rank does not
        # fresh upstream gradients for its own outputs: a data-dependent output shape differs on other inputs
        own: list[BaseException] = []  # fusecheck's own failure while screening a result: not the compiler's

        def add(name, t):
            try:
                screen.add(name, t)
            except Exception as exc:
                own.append(exc)
                raise
        try:
            rolled = p.run(fn, case=other, cotangents=None, digests_only=True, each=add)
        except Exception as exc:
            if own or p.passes_through(exc) or (eager_rolled is None and not _eager_runs(eager_call)):
                raise  # eager cannot run there either: the target cannot take these inputs (skipped below)
            # eager runs on these inputs and the compiled call did not: a crash on a later call is the compiler's
            # (a launch failure, an illegal address), never a skipped probe and a PASS
            raise CompileError(f"backend {p.backend.name!r} on {p.name!r}: {CALL} raised where eager runs on the "
                               f"same inputs: {_one_line(exc)}") from exc
        screen.drop(rolled.lost)
        unchanged = {k for k, d in first.items() if rolled.digests.get(k) == d}
        if eager_rolled is not None:  # only these are read from here on: the rest is freed before eager re-runs
            eager_rolled = {k: v for k, v in eager_rolled.items() if k in unchanged}
        screen.eager = {}
        if p.agree(bool(screen.kept)):
            _follow(p, screen, eager_call, eager_rolled)
        if eager_rolled is None and p.agree(bool(unchanged)):
            eager_rolled = eager_call()
    except Exception as exc:
        if p.passes_through(exc) or isinstance(exc, CompileError):
            raise
        p.notes.append(f"the call on other inputs (the inputs rolled by one) raised {type(exc).__name__}: "
                       f"{str(exc)[:160]}; the check for a compiled call handing back stale results was skipped")
        return {}, {}, {}, {}
    finally:
        del capture.graphs[graphs:]
    ignoring = ignoring_inputs(p.policy, eager.first.all(keys), eager_rolled, unchanged,
                               compiled_first) if eager_rolled else {}
    del eager_rolled, screen.eager
    third = p.run(fn, cotangents=cotangents, digests_only=True, differs_from=first)
    differ = {k for k, d in first.items() if third.digests.get(k) != d}
    return ({k: v for k, v in third.differing.items() if k in differ},
            {k: AFTER_OTHER_INPUTS for k in differ if k in third.differing}, ignoring, screen.stats)


def _eager_runs(eager_call) -> bool:
    """Whether eager runs on the rolled inputs: if not, the target cannot take them and the probe is skipped."""
    try:
        eager_call()
    except Exception:  # noqa: BLE001 - any failure of eager here means the probe does not apply
        return False
    return True


def _follow(p: Pipeline, screen: RolledScreen, eager_call, eager_rolled: dict | None) -> None:
    """The kept results of the rolled call judged against eager following compiled's choices
    (rolled_choices.judge_kept). fusecheck's own failure there leaves them to their bits, said in a note, and
    the rest of the probe (the call after it on the first inputs) goes on."""
    theirs = screen.choices.theirs() if screen.choices is not None else []
    screen.choices = None  # eager's choices: not read again
    try:
        screen.stats.update(judge_kept(screen.kept, theirs, eager_call, tie=p.policy.ratios.decision_tie,
                                       seed=p.opts.seed, notes=p.notes, selects=screen.selects,
                                       reference=eager_rolled))
    except Exception as exc:
        if p.passes_through(exc):
            raise
        p.notes.append(f"{CALL}: eager could not be run following compiled's choices ({type(exc).__name__}: "
                       f"{str(exc)[:160]}): its {len(screen.kept)} kept result(s) are judged by their bits only")
    screen.kept.clear()


def _rolled_screen(p: Pipeline, capture: GraphCapture, graphs) -> RolledScreen:
    """What the rolled call is judged on. A selection (topk routing, sort, argmax) moves whole output rows at a
    near-tie; the other decisions (relu, max-pool, clipping) are continuous in their forward value and move
    gradients only, so they matter with --train. Where compiled's choices are read from its taps, eager follows
    them (check/rolled_choices.py) and everything is screened. A user backend has no taps: there a selection
    leaves the bits only, a mask the outputs only. Said in a note."""
    selects = [n for g in graphs for n in decision_nodes(g.gm, SELECTING_TAPS)]
    routes = [n for g in graphs for n in decision_nodes(g.gm)] if p.opts.train else []
    if not (selects or routes):
        return RolledScreen()
    if capture.decisions is not None:
        return RolledScreen(follows=True, selects=bool(selects))
    what = "is judged by its bits only (stale or ignored inputs)" if selects else "is judged on its outputs only"
    p.notes.append(f"the compiled call on other inputs (the inputs rolled by one) {what}, not against eager's call: "
                   f"the model takes discrete decisions ({', '.join((selects or routes)[:3])}) and a user backend's "
                   f"graph has no taps to read compiled's choices from")
    return RolledScreen(gradients=False, screens=not selects)


def _graph_breaks() -> dict[str, int]:
    """Dynamo's counted graph breaks and skipped frames (reason -> count): the first line of each reason."""
    from torch._dynamo.utils import counters
    out: dict[str, int] = {}
    for kind in ("graph_break", "unimplemented"):
        for reason, n in counters.get(kind, {}).items():
            out[str(reason).strip().splitlines()[0]] = n
    return out


def _one_line(exc: BaseException) -> str:
    """The backend's own error in one line: dynamo wraps it (BackendCompilerFailed, with our GraphCapture's repr
    and a TORCHDYNAMO_VERBOSE hint over several lines); the user wrote the inner one."""
    inner = getattr(exc, "inner_exception", None) or exc
    lines = [line.strip() for line in str(inner).splitlines()
             if line.strip() and not line.lstrip().startswith(("Set TORCHDYNAMO_VERBOSE", "For even more developer"))]
    return f"{type(inner).__name__}: {'; '.join(lines)[:400]}"


def _nothing_compiled(p: Pipeline, before: dict[str, int]) -> str:
    """No graph reached the backend: "compiled" ran eagerly, so a PASS would judge eager against itself. The
    graph-break reasons dynamo counted during these runs say why."""
    reasons = [r for r, n in _graph_breaks().items() if n > before.get(r, 0)]
    why = f" (graph break: {'; '.join(r[:160] for r in reasons[:2])})" if reasons else ""
    return (f"backend {p.backend.name!r} was never called on {p.name!r}: dynamo captured no graph{why}, so the "
            "compiled runs ran eagerly and there is nothing compiled to judge")


def _record_eager_choices(p: Pipeline, runs: CompiledRuns, cotangents) -> None:
    """The compiled graphs decide (topk routing...): eager's choices, from one more run (not recorded in the
    first: a dispatch mode there would change how eager runs torch.cond)."""
    if not p.agree(bool(runs.choices)):
        return
    try:
        with p.measured("eager"), runs.eager_choices:
            p.run(p.case.model, cotangents=cotangents, digests_only=True)
    except Exception as exc:  # e.g. an op that refuses Python dispatch modes: judge without following
        if p.passes_through(exc):
            raise
        runs.eager_choices.calls.clear()
        p.notes.append(f"decisions: eager's choices could not be recorded ({type(exc).__name__}: "
                       f"{str(exc)[:120]}); the golden keeps its own")
    if not runs.choices:
        runs.eager_choices.calls.clear()  # run only to keep step with a peer: nothing to follow here
