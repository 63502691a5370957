"""The core check: eager (twice), compiled (twice) and golden side by side, judged output by output.

Data flows one way: prepare case -> capture+compile -> run eager/compiled/golden -> compare -> report.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from fusecheck.backends import Backend, resolve_backend
from fusecheck.capture import CapturedGraph, GraphCapture
from fusecheck.case import Case, TargetError
from fusecheck.compare import Comparison, Metrics, Status, Verdict, compare, input_error
from fusecheck.compare.metrics import bitwise_equal
from fusecheck.devices import resolve_device, resolve_dtype
from fusecheck.execute import RunResult, restore_state, rng_changed, rng_states, run_once, state_snapshot
from fusecheck.golden import cast_tree, golden_case, prepare_case
from fusecheck.golden_fallback import GoldenError, GoldenFallback
from fusecheck.passes import toggled
from fusecheck.passes.census import collecting_census
from fusecheck.policy import Policy
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
            "seconds": self.seconds,
        }


def _worst(a: Metrics, b: Metrics) -> Metrics:
    """Per-metric worst of two eager-vs-golden measurements (cosine: the smaller)."""
    return Metrics({k: (min if k == "cosine" else max)(a.values[k], b.values[k]) for k in a.values})


def _toggle_contexts(toggles: Sequence[str], backend: Backend, stack: contextlib.ExitStack):
    """Enter the toggles and, for Inductor, the kernel census. Returns the census."""
    if toggles and not backend.is_inductor:
        raise TargetError(f"toggles {list(toggles)} act on Inductor; backend {backend.name!r} is not Inductor")
    stack.enter_context(toggled(list(toggles)))
    return stack.enter_context(collecting_census()) if backend.is_inductor else None


def _judge_row(name: str, runs: dict[str, dict[str, torch.Tensor]], policy: Policy, exact: bool,
               eager_noisy: bool) -> Comparison:
    """`runs`: each run's results by name (eager, eager2, compiled, compiled2, golden)."""
    e1, e2, g = runs["eager"].get(name), runs["eager2"].get(name), runs["golden"].get(name)
    c1, c2 = runs["compiled"].get(name), runs["compiled2"].get(name)
    if c1 is None:
        return input_error(name, "structure_mismatch", f"compiled produced no {name} (eager did)", e1)
    if not (e1.is_floating_point() or e1.is_complex()):
        g = None  # integers and bools are compared exactly against eager
    ref_g = None
    if eager_noisy and g is not None and e1.shape == g.shape:
        both = compare(e2, e1, g, policy=policy, name=name)
        if both.vs_golden is not None:
            ref_g = _worst(both.vs_golden, both.reference_vs_golden)
    # Only forward outputs of a movement graph must be exact: the backward of expand/broadcast is a sum.
    exact = exact and name.startswith("output")
    row = compare(c1, e1, g, policy=policy, exact=exact, name=name, reference_vs_golden=ref_g,
                  exact_reason="the captured graphs are pure data movement, which must be bitwise equal")
    if eager_noisy:
        row.notes.append("eager is not bitwise repeatable: judged against the worse of two eager runs")
    if row.vs_reference is not None and isinstance(c2, torch.Tensor) and c2.shape == c1.shape and c2.dtype == c1.dtype:
        same = bitwise_equal(c1, c2)
        if same != c1.numel():
            msg = f"compiled output changed between two runs with the same inputs ({c1.numel() - same} elements)"
            if eager_noisy:
                row.notes.append(msg + "; eager is nondeterministic too")
            else:
                row.verdict = Verdict(Status.FAIL, "nondeterministic_compiled", msg + "; eager is repeatable")
    return row


def _differing(first: RunResult, second: RunResult, extra: tuple[str, ...] = ()) -> set[str]:
    """Names of the results (outputs, gradients, `extra` mutated state) whose bits differ between two runs."""
    other = second.all(extra)
    return {k for k, v in first.all(extra).items() if k not in other or bitwise_equal(v, other[k]) != v.numel()}


def run_check(case: Case, *, backend: str = "inductor", dtype: str | torch.dtype | None = None,
              device: str = "cpu", train: bool = False, policy: Policy | None = None,
              toggles: Sequence[str] = (), seed: int = 0) -> CheckReport:
    """Check `case` compiled with `backend` against eager and the golden. Raises TargetError on bad input
    (exit 2) and CompileError when the backend fails (exit 3); otherwise returns a report with a verdict."""
    policy = policy or Policy()
    dev = resolve_device(device)
    run_dtype = resolve_dtype(dtype) if isinstance(dtype, str) or dtype is None else dtype
    be = resolve_backend(backend)
    prepared = prepare_case(case, run_dtype, device)
    timings: dict[str, float] = {}

    t = time.perf_counter()
    torch.manual_seed(seed)
    phase(f"running {case.name!r} in eager mode")
    try:
        state = state_snapshot(prepared)  # every run starts from this module state and fresh input copies
        rng_before = rng_states(device)
        eager = run_once(prepared.model, prepared, train=train, seed=seed, state=state)
        drew = rng_changed(rng_before, rng_states(device))
        eager2 = run_once(prepared.model, prepared, train=train, cotangents=eager.cotangents, state=state)
    except TargetError:
        raise
    except Exception as exc:
        raise TargetError(f"the target {case.name!r} fails in eager mode: {type(exc).__name__}: {exc}") from exc
    if drew and _differing(eager, eager2):
        # a forward that reseeds itself (torch.manual_seed inside) also moves the RNG, but repeats itself
        raise TargetError(f"the target {case.name!r} draws random numbers in its forward or backward (the RNG "
                          "advanced during the eager run and two eager runs differ): eager, compiled and golden "
                          "would draw different numbers, so no element-wise verdict is possible. Pass the noise "
                          "in as an input, or turn the random op off (dropout p=0)")
    cotangents = eager.cotangents
    timings["eager"] = time.perf_counter() - t

    t = time.perf_counter()
    torch._dynamo.reset()
    capture = GraphCapture(be.make())
    compiled_fn = torch.compile(prepared.model, backend=capture)
    phase(f"compiling and running {case.name!r} with backend {be.name!r}")
    with contextlib.ExitStack() as stack:
        census = _toggle_contexts(toggles, be, stack)
        try:
            compiled = run_once(compiled_fn, prepared, train=train, cotangents=cotangents, state=state)
            compiled2 = run_once(compiled_fn, prepared, train=train, cotangents=cotangents, state=state)
        except TargetError:
            raise
        except Exception as exc:
            raise CompileError(f"backend {be.name!r} failed on {case.name!r}: {type(exc).__name__}: {exc}") from exc
    torch._dynamo.reset()
    timings["compiled"] = time.perf_counter() - t

    t = time.perf_counter()
    phase(f"running the {dev.golden_dtype} golden of {case.name!r}")
    restore_state(prepared, state)  # the golden copies the model as every run starts, not as the last left it
    gcase = golden_case(prepared, dev.golden_dtype)
    fallback = GoldenFallback(dev.golden_dtype)
    try:
        with fallback:
            golden = run_once(gcase.model, gcase, train=train, cotangents=cast_tree(cotangents, dev.golden_dtype),
                              state=state_snapshot(gcase))
    except TargetError:
        raise
    except Exception as exc:
        raise GoldenError(f"the {dev.golden_dtype} golden run of {case.name!r} failed where eager ran: "
                          f"{type(exc).__name__}: {exc}") from exc
    timings["golden"] = time.perf_counter() - t

    notes = fallback.notes()
    if dev.golden_dtype != torch.float64:
        notes.append(f"golden runs in {dev.golden_dtype} on {device}: the device has no fp64")
    if eager.skipped:
        notes.append(f"not compared: {', '.join(eager.skipped)} hold tensors but are neither tensors, pytree "
                     "containers nor dataclasses; return their tensors to have them judged")
    if not capture.graphs:
        notes.append("the backend was never called: dynamo captured no graph, compiled ran eagerly")
    elif len(capture.graphs) > 1:
        notes.append(f"{len(capture.graphs)} graphs captured (graph breaks)")
    exact = capture.movement_only
    if exact:
        notes.append("every captured graph is pure data movement: forward outputs must be bitwise equal to eager")

    # In-place updates of inputs or buffers are results too: judged like outputs when eager or compiled made any.
    mutated = tuple(sorted(set(eager.mutated) | set(compiled.mutated)))
    if mutated:
        notes.append(f"the model mutates {', '.join(k.removeprefix('mutated.') for k in mutated)}: "
                     "the values after the call are judged too")
    t = time.perf_counter()
    phase(f"comparing the outputs of {case.name!r}")
    noisy = _differing(eager, eager2, mutated)
    runs = {k: r.all(mutated) for k, r in (("eager", eager), ("eager2", eager2), ("compiled", compiled),
                                            ("compiled2", compiled2), ("golden", golden))}
    rows = [_judge_row(name, runs, policy, exact, name in noisy) for name in runs["eager"]]
    for name in compiled.all().keys() - eager.all().keys():
        rows.append(input_error(name, "structure_mismatch", f"compiled produced {name}, eager did not"))
    timings["compare"] = time.perf_counter() - t
    notes.extend(r.describe() for r in policy.relaxations)

    own = next((v.dtype for v in eager.outputs.values() if v.is_floating_point()), None)
    shown = str(run_dtype) if run_dtype else f"{own or 'none'} (the model's own)"
    return CheckReport(case.name, be.name, shown.replace("torch.", ""), device, train,
                       seed, policy, rows, capture.graphs, notes, tuple(toggles), census,
                       eager_repeatable=not noisy,
                       compiled_repeatable=all(r.verdict.code != "nondeterministic_compiled" for r in rows),
                       movement_only=exact, seconds=timings)
