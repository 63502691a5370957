"""Benchmark: fusecheck bisect vs torch's CompilerBisector on the planted culprits, in one run.

For each planted case: compiles, wall time and what each tool names. torch's bisector gets the test
function a torch user would write (fresh compile, then `torch.allclose` against eager with fusecheck's
default tolerance for the dtype, or bitwise equality); it is golden-unaware by design.

    python benchmarks/bisect_vs_torch.py [--out docs/bisect_benchmark.md] [--only NAME,...]
"""
from __future__ import annotations

import sys

# This file is named like the stdlib module `bisect`; run as a script, its folder must not shadow it.
sys.path[:] = [p for p in sys.path if p not in ("", __file__.rsplit("/", 1)[0])]

import argparse
import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402
from tabulate import tabulate  # noqa: E402

from fusecheck.bisect import bisect  # noqa: E402
from fusecheck.check import CheckOptions  # noqa: E402
from fusecheck.case import Case  # noqa: E402
from fusecheck.runs.cast import prepare_case  # noqa: E402
from fusecheck.devices import resolve_dtype  # noqa: E402
from fusecheck.policy import Policy  # noqa: E402
from tests.planted import (chain_targets, decomposition, fusion, fusion_pair, inlining, lowering,  # noqa: E402
                           pattern_pass, softmax_pass, targets)

LOSSY_BACKEND = "tests/planted/rounding_backend.py:lossy_exp_backend"


@dataclass
class BenchCase:
    name: str
    plants: list
    builder: object
    dtype: str | None
    planted: list[tuple[str, str, tuple[str, ...]]]  # per culprit: (kind, names it exactly, comes near)
    backend: str = "inductor"


CASES = [
    BenchCase("pattern pass", [pattern_pass], targets.sum_norm, None,
              [("pattern", "lossy_sum_rewrite", ("post_grad_custom_post_pass",))]),
    BenchCase("decomposition", [decomposition], targets.standardize, None,
              [("decomposition", "var_mean", ("var_mean",))]),
    BenchCase("fusion", [fusion], targets.center, None, [("fusion", "mean", ("mean", "sub"))]),
    BenchCase("inlining", [inlining], targets.exp_mix, None, [("inlining", "exp", ("exp", "mul"))]),
    BenchCase("lowering", [lowering], targets.exp_mix, None, [("lowering", "exp", ("exp",))]),
    BenchCase("decomposition + inlining", [decomposition, inlining], targets.standardize_exp, None,
              [("decomposition", "var_mean", ("var_mean",)), ("inlining", "exp", ("exp", "mul"))]),
    BenchCase("benign (bf16, bits only)", [], targets.benign, "bf16", []),
    # issue 9: a pass enabled by a decomposition; a pair-only fusion bug in a chain; a custom backend
    BenchCase("pass on decomposed softmax", [softmax_pass], chain_targets.scaled_softmax, None,
              [("pass", "LossySoftmaxSum", ("post_grad_custom_post_pass",))]),
    BenchCase("fusion pair in a chain", [fusion_pair], chain_targets.exp_sum_chain, None,
              [("fusion", "+ [sum_1]", ("exp", "sum"))]),
    BenchCase("custom backend rounds exp", [], chain_targets.tanh_exp_mlp, None,
              [("subgraph", "exp (exp)", ("exp",))], backend=LOSSY_BACKEND),
]


def _case(c: BenchCase) -> Case:
    torch.manual_seed(0)
    model, x = c.builder()
    return Case(model, (x,), c.name)


# torch's subsystems, as decision kinds
TORCH_KINDS = {"lowerings": "lowering", "decomposition": "decomposition", "post_grad_passes": "pass",
               "pre_grad_passes": "pass", "joint_graph_passes": "pass"}


def _score(named: list[tuple[str, str]], planted: list[tuple[str, str, tuple[str, ...]]]) -> str:
    """exact: right kind and right object; near: the object's slot or one node of it, wrong kind."""
    if not planted:
        return "correct (nothing blamed)" if not named else "WRONG: blamed a bit change"
    exact = sum(any(k == kind and needle in text for k, text in named) for kind, needle, _ in planted)
    near = sum(not any(k == kind and needle in text for k, text in named) and any(n in text for n in ns for _, text in named)
               for kind, needle, ns in planted)
    extra = max(0, len(named) - exact - near)
    if exact == len(planted) and not extra:
        return f"correct ({exact}/{len(planted)} exact)"
    parts = [f"{exact}/{len(planted)} exact"] + ([f"{near} near"] if near else []) + ([f"{extra} other"] if extra else [])
    return ", ".join(parts)


def run_fusecheck(c: BenchCase) -> dict:
    t = time.perf_counter()
    if c.backend != "inductor":
        from fusecheck.bisect.backend_bisect import bisect_backend
        r = bisect_backend(_case(c), c.backend, CheckOptions(dtype=c.dtype), max_compiles=40)
    else:
        r = bisect(_case(c), CheckOptions(dtype=c.dtype), max_compiles=40)
    named = [(x.decision.kind, x.decision.name) for x in r.culprits]
    text = "; ".join(f"{k}: {n}" + (" (partial)" if x.partial else "") for (k, n), x in zip(named, r.culprits))
    notes = ([f"{r.no_inductor} without Inductor"] if r.no_inductor else []) + \
        ([f"{r.attribution} per-kernel attribution"] if getattr(r, "attribution", 0) else [])
    return {"compiles": r.compiles, "seconds": time.perf_counter() - t,
            "named": (f"[of the compiles: {', '.join(notes)}] " if notes else "") + (text or r.status),
            "score": _score(named, c.planted)}


def run_torch(c: BenchCase, mode: str) -> dict:
    from torch._inductor.compiler_bisector import CompilerBisector

    if c.backend != "inductor":   # CompilerBisector only switches Inductor's own stages and subsystems
        return {"compiles": 0, "seconds": 0.0, "named": "n/a: bisects Inductor only, not a custom backend",
                "score": "n/a"}
    case = _case(c)
    prepared = prepare_case(case, resolve_dtype(c.dtype), "cpu")
    model, (x,) = prepared.model, prepared.inputs
    as_tuple = lambda o: o if isinstance(o, tuple) else (o,)  # noqa: E731  (some targets return two outputs)
    with torch.no_grad():
        ref = as_tuple(model(x))
    tol = Policy().tolerance(ref[0].dtype)
    calls = 0

    def good() -> bool:
        nonlocal calls
        calls += 1
        torch._dynamo.reset()
        with torch.no_grad():
            out = as_tuple(torch.compile(model)(x))
        if mode == "bitwise":
            return all(bool(torch.equal(o, r)) for o, r in zip(out, ref))
        return all(bool(torch.allclose(o, r, rtol=tol.rtol, atol=tol.atol)) for o, r in zip(out, ref))

    t = time.perf_counter()
    with torch._inductor.config.patch(force_disable_caches=True):
        result = CompilerBisector.do_bisect(good)
    seconds = time.perf_counter() - t
    if result is None:
        named = []
        text = "nothing (test fn passed)"
    else:
        text = f"{result.backend}/{result.subsystem or '-'}#{result.bisect_number}: {result.debug_info or ''}".strip()
        named = [(TORCH_KINDS.get(result.subsystem or "", result.subsystem or result.backend), text)]
    return {"compiles": calls, "seconds": seconds, "named": text, "score": _score(named, c.planted), "pairs": named}


def run_torch_per_culprit(c: BenchCase, mode: str) -> dict:
    """CompilerBisector stops at its first culprit. What a user would do next: take out what it named and run
    it again. Here the *plant* it named (exactly or near) is removed, not one held-off decision, and it is
    re-run until it names no remaining plant; compiles and time are summed over the runs."""
    remaining = list(zip(c.plants, c.planted))
    calls, seconds, texts, pairs = 0, 0.0, [], []
    while remaining:
        with contextlib.ExitStack() as stack:
            for plant, _ in remaining:
                stack.enter_context(plant.planted())
            r = run_torch(c, mode)
        calls, seconds = calls + r["compiles"], seconds + r["seconds"]
        texts.append(r["named"])
        pairs += r["pairs"]
        scores = [_score(r["pairs"], [p]) for _, p in remaining]
        hit = [i for i, sc in enumerate(scores) if sc.startswith("correct") or "near" in sc]
        if not hit:
            break
        remaining.pop(hit[0])
    return {"compiles": calls, "seconds": seconds, "named": " / then: ".join(t[:75] for t in texts),
            "score": _score(pairs, c.planted)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="write the markdown table here")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--torch-modes", default="allclose,bitwise")
    args = ap.parse_args()
    cases = [c for c in CASES if not args.only or c.name in args.only.split(",")]
    rows, per = [], {}   # per[tool] = {case: result}, cases the tool can run
    for c in cases:
        with contextlib.ExitStack() as stack:
            for p in c.plants:
                stack.enter_context(p.planted())
            results = {"fusecheck": run_fusecheck(c)}
            for mode in args.torch_modes.split(","):
                results[f"torch CompilerBisector ({mode})"] = run_torch(c, mode)
        if len(c.plants) > 1 and "allclose" in args.torch_modes:   # a separate row, not the plain count
            results["torch CompilerBisector (allclose), re-run per culprit"] = run_torch_per_culprit(c, "allclose")
        for tool, r in results.items():
            rows.append([c.name, tool, r["compiles"], f"{r['seconds']:.1f}", r["score"], r["named"][:160]])
            if r["score"] != "n/a":   # a case the tool cannot run is not counted in its totals
                per.setdefault(tool, {})[c.name] = r
            print(f"{c.name:<28} {tool:<36} compiles {r['compiles']:>3}  {r['seconds']:6.1f} s  {r['score']}",
                  flush=True)
    table = tabulate(rows, headers=["case", "tool", "compiles", "wall s", "verdict", "names"], tablefmt="github")
    fc = per.get("fusecheck", {})
    summary = []
    for tool, res in per.items():
        comp, secs = sum(r["compiles"] for r in res.values()), sum(r["seconds"] for r in res.values())
        ok = sum(r["score"].startswith("correct") for r in res.values())
        # ratios against fusecheck on the same cases only
        fcomp = sum(fc[n]["compiles"] for n in res if n in fc)
        fsecs = sum(fc[n]["seconds"] for n in res if n in fc)
        summary.append([tool, comp, f"{secs:.1f}", f"{ok}/{len(res)}", f"{comp / fcomp:.2f}" if fcomp else "-",
                        f"{secs / fsecs:.2f}" if fsecs else "-"])
    summary_table = tabulate(summary, headers=["tool", "compiles (total)", "wall s (total)", "correct",
                                               "compiles / fusecheck", "time / fusecheck"], tablefmt="github")
    text = (f"torch {torch.__version__}, CPU, {os.cpu_count()} cores\n\n{table}\n\n{summary_table}\n")
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
