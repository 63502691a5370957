"""`fusecheck bisect TARGET --backend FILE.py:NAME` (or any non-Inductor backend): the backend's decisions are
opaque, so the graph is split instead (`graph_split`), down to the smallest subgraph the backend makes worse
than eager against the fp64 golden. The verdict on the whole target comes from `run_check` first."""
from __future__ import annotations

import time
from typing import Any, Callable

from fusecheck.backends import resolve_backend
from fusecheck.bisect.gates import Decision
from fusecheck.bisect.graph_split import Splitter, capture_graph
from fusecheck.bisect.result import BisectResult, Culprit
from fusecheck.runs.cast import prepare_case
from fusecheck.policy import Policy
from fusecheck.check import CheckOptions, CompileError, report_dtype, run_check


def bisect_backend(case: Any, backend: str, opts: CheckOptions | None = None, *, max_compiles: int = 40,
                   repro: str | None = None, progress: Callable[[str], None] | None = None) -> BisectResult:
    opts = (opts or CheckOptions()).replace(backend=backend)
    policy = opts.policy or Policy()
    say_lines: list[str] = []
    t0 = time.perf_counter()
    compiles = 0

    def say(stage: str, msg: str) -> None:
        line = f"[bisect] {stage:<9} compiles {compiles}/{max_compiles}  {msg}"
        say_lines.append(line)
        (progress or (lambda _: None))(line)

    def say_at(extra: int, stage: str, msg: str) -> None:
        nonlocal compiles
        compiles += extra
        try:
            say(stage, msg)
        finally:
            compiles -= extra

    def result(status: str, message: str, base: Any, culprits: list[Culprit]) -> BisectResult:
        say("done", message)
        return BisectResult(status, message, base, culprits, compiles, max_compiles, {}, None, {}, [],
                            time.perf_counter() - t0, say_lines)

    compiles += 1
    try:
        report = run_check(case, opts.replace(policy=policy))
    except CompileError as exc:
        return result("error", f"the target does not compile: {exc}", None, [])
    base = {"passed": report.passed, "rows": {r.name: {"status": r.verdict.status.value, "code": r.verdict.code,
                                                       "rmse": getattr(r.vs_golden, "rmse", None),
                                                       "eager_rmse": getattr(r.reference_vs_golden, "rmse", None),
                                                       "error_ratio": r.error_ratio} for r in report.rows}}
    say("baseline", f"{report.status} with backend {backend}")
    if report.exit_code == 2:
        return result("cannot_judge", "some outputs cannot be judged (see `fusecheck check`): nothing to bisect",
                      base, [])
    if report.passed:
        return result("pass", f"the target already passes with {backend}: compiled is not worse than eager",
                      base, [])
    if opts.train:
        say("split", "--train: the backward graph is not split; the forward graph is")
    fn = resolve_backend(backend).make()
    prepared = prepare_case(case, report_dtype(opts.dtype), opts.device)
    graphs = capture_graph(prepared.model, prepared.inputs, prepared.kwargs)
    for g, (gm, inputs) in enumerate(graphs):
        splitter = Splitter(gm, inputs, fn, policy, on_probe=lambda msg: say("split", f"graph {g}: {msg}"))
        splitter.on_probe = lambda msg, s=splitter, g=g: (say_at(s.compiles, "split", f"graph {g}: {msg}"))
        remaining = max_compiles - compiles
        if remaining < 1:
            break
        found = splitter.search(budget=remaining)
        compiles += splitter.compiles
        if found is None:
            continue
        w, j = found
        name = f"graph {g} nodes {w.start}..{w.stop - 1}: " + ", ".join(f"{n} ({o})" for n, o in zip(w.nodes, w.ops))
        d = Decision("subgraph", w.start, f"g{g}:{w.start}-{w.stop}", name, w.nodes, w.ops, g)
        culprit = Culprit(d, False, {"passed": False, "rows": j.rows}, {}, True)
        if repro:
            from fusecheck.bisect.repro import write_repro
            write_repro(repro, w.gm, w.inputs, w.outputs, backend,
                        f"{case.name}: {name}; fusecheck measured error ratio {j.worst_ratio:.4g}")
            say("repro", f"wrote {repro} (standalone: python {repro})")
        return result("culprits", f"the smallest subgraph {backend} makes worse than eager: {name} "
                      f"(compiled error {j.worst_ratio:.3g}x eager's against fp64)", base, [culprit])
    return result("no_culprit", "no captured subgraph is worse than eager on its own (the error needs the "
                  "whole program, or --max-compiles ran out)", base, [])


def inductor_repro(case: Any, opts: CheckOptions, path: str, budget: int,
                   say: Callable[[str, str], None]) -> int:
    """After an Inductor bisection: split the captured graph with Inductor itself (culprits on, as by default)
    down to the smallest subgraph worse than eager, and write its repro. Returns the compiles used."""
    import torch

    from fusecheck.bisect.repro import write_repro

    prepared = prepare_case(case, report_dtype(opts.dtype), opts.device)
    inductor = torch._dynamo.lookup_backend("inductor")
    used = 0
    with torch._inductor.config.patch(force_disable_caches=True):
        for g, (gm, inputs) in enumerate(capture_graph(prepared.model, prepared.inputs, prepared.kwargs)):
            splitter = Splitter(gm, inputs, inductor, opts.policy or Policy(),
                                on_probe=lambda msg, g=g: say("repro", f"graph {g}: {msg}"))
            found = splitter.search(budget=budget - used)
            used += splitter.compiles
            if found is not None:
                w, j = found
                write_repro(path, w.gm, w.inputs, w.outputs, "inductor",
                            f"{case.name}: graph {g} nodes {', '.join(w.nodes)}; fusecheck measured error ratio "
                            f"{j.worst_ratio:.4g}")
                say("repro", f"wrote {path} (standalone: python {path})")
                return used
    where = " (the forward graphs are split; a culprit acting in the backward is not reached)" if opts.train else ""
    say("repro", f"no subgraph alone is worse than eager within the budget{where}: {path} not written")
    return used
