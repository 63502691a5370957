"""Verdict stability and power on real architectures (issue 14), side by side with the RMSE-only rule.

stability: stock Inductor on tiny real models (built offline from transformers configs, random weights),
  dtypes x forward/--train x seeds: count of FAIL verdicts (must be 0) and, per check, the largest ratio
  to its limit over all rows (how close each check came to flipping).
power: the same models with a planted degradation of controlled strength, active only in the compiled
  graph (a forward hook that acts when `torch.compiler.is_compiling()`, so eager and the golden are
  untouched): detection rate per (plant, strength) for the multi-metric verdict and for torch's rule
  (`torch._dynamo.utils.same` with fp64_ref: allclose, else rmse(res) <= m * rmse(ref) + tol/10, m = 3 in
  fp16/bf16 or under 1000 elements, else 2), and each run's largest compiled/eager RMSE ratio.

    python benchmarks/verdict_stability.py --device cpu --seeds 0-2 --models gpt2,vit --quick --json out.json
Only the public `fusecheck.run.run_check` is called.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fusecheck.policy import Ratios  # noqa: E402
from fusecheck.run import run_check  # noqa: E402

MODELS = ["gpt2", "llama", "bert", "qwen2", "mixtral", "vit", "resnet", "mobilenet_v2"]
SMALL_TENSOR = Ratios().small_tensor_numel  # the RMSE ratio limit is 2 from here up, 3 below
CHECKS = ["rmse", "mean_rel", "max_rel", "small_value_errors", "small_value_max_abs"]


def build(model: str, seed: int):
    """Weights and inputs both drawn from `seed`."""
    import models.hf as hf
    torch.manual_seed(seed)
    return getattr(hf, f"build_{model}")()


# ---- planted degradations: generic, with a strength, only inside the compiled graph -------------------

def _rounded(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x rounded to `bits` mantissa bits by arithmetic (frexp/round/ldexp): a dtype round trip such as
    .to(bf16).float() is one Inductor may drop inside a fused kernel."""
    m, e = torch.frexp(x.float())
    scale = 2.0 ** (bits + 1)
    return torch.ldexp(torch.round(m * scale) / scale, e)


def _round_bits(x: torch.Tensor, bits: float) -> torch.Tensor:
    """x rounded to `bits` mantissa bits (7 = bf16: a no-op in a bf16 model, 6 doubles bf16's rounding
    error, 5 quadruples it), straight-through in backward."""
    return x + (_rounded(x, int(bits)).to(x.dtype) - x).detach()


def _bf16_sum(module: torch.nn.Module, x: torch.Tensor, out: torch.Tensor, chunks: float) -> torch.Tensor:
    """A Linear's reduction accumulated in bf16: the K sum split into `chunks` partial products, the running
    sum rounded to bf16 after each (eager accumulates in fp32 and rounds once), straight-through in
    backward. In an fp32 model this is also the dropped fp32 upcast."""
    w = module.weight if isinstance(module, torch.nn.Linear) else module.weight.t()  # Conv1D: [in, out]
    acc = torch.zeros_like(out, dtype=torch.float32)
    for xc, wc in zip(x.chunk(int(chunks), -1), w.chunk(int(chunks), -1)):
        acc = _rounded(acc + (xc @ wc.t()).float(), 7)
    planted = acc.to(out.dtype) + (module.bias if module.bias is not None else 0)
    return out + (planted - out).detach()


def _perturb(x: torch.Tensor, rel: float) -> torch.Tensor:
    """x * (1 + rel * w) with w a fixed pseudo-random pattern in [-1, 1] (a function of x, no RNG)."""
    return x * (1 + rel * torch.sin(x.float() * 12345.678).to(x.dtype))


def _flip_small(x: torch.Tensor, share: float) -> torch.Tensor:
    """Sign flipped on the elements with |x| below `share` of the tensor's largest magnitude."""
    return torch.where(x.abs() < share * x.detach().abs().amax(), -x, x)


PLANTS = {  # name -> (transform(x, strength), strengths from weak to strong)
    # fewer mantissa bits: stronger (7 = bf16 in fp32); around 20 bits the error reaches fp32 eager's own;
    # in a bf16 model 6 and 5 bits double and quadruple that op's rounding error
    "round_bits": (_round_bits, [22, 20, 18, 16, 7, 6, 5, 4]),
    "perturb": (_perturb, [1e-7, 1e-6, 3e-6, 1e-5, 1e-3]),
    "flip_small": (_flip_small, [1e-4, 1e-3, 1e-2]),
}
# plants that recompute the hooked Linear from its input: name -> (fn(module, x, out, strength), strengths)
LINEAR_PLANTS = {"bf16_sum": (_bf16_sum, [2, 4, 8, 16, 32])}
# "<plant>_all": the same degradation in every hooked layer, not only the middle one (a pass that drops an
# upcast everywhere); in bf16 one layer's extra rounding drowns in every other layer's
EVERY_LAYER = "_all"
PLANTS.update({k + EVERY_LAYER: v for k, v in PLANTS.items() if k == "round_bits"})
LINEAR_PLANTS.update({k + EVERY_LAYER: v for k, v in LINEAR_PLANTS.items()})
QUICK = {"round_bits": [18, 6], "perturb": [1e-6, 3e-6], "flip_small": [1e-3, 1e-2], "bf16_sum": [4, 16],
         "round_bits_all": [6, 5, 4], "bf16_sum_all": [4, 16]}


def plant(case, kind: str, strength: float):
    """Hook the middle Linear/Conv1D/Conv2d (Linear/Conv1D for LINEAR_PLANTS; every one for `*_all`) of the
    model so that its output is degraded in the compiled run only."""
    from transformers.pytorch_utils import Conv1D  # GPT-2's projections
    kinds = (torch.nn.Linear, Conv1D) if kind in LINEAR_PLANTS else (torch.nn.Linear, Conv1D, torch.nn.Conv2d)
    layers = [m for m in case.model.modules() if isinstance(m, kinds)]
    targets = layers if kind.endswith(EVERY_LAYER) else [layers[len(layers) // 2]]
    if kind in LINEAR_PLANTS:
        fn = LINEAR_PLANTS[kind][0]

        def degrade(module, args, out):
            return fn(module, args[0], out, strength)
    else:
        fn = PLANTS[kind][0]

        def degrade(module, args, out):
            return fn(out, strength)

    def hook(module, args, out):
        return degrade(module, args, out) if torch.compiler.is_compiling() else out
    for target in targets:
        target.register_forward_hook(hook)
    return case


def strengths_of(kind: str, quick: bool) -> list[float]:
    return QUICK[kind] if quick else {**PLANTS, **LINEAR_PLANTS}[kind][1]


# ---- the two rules on one report ----------------------------------------------------------------------

def rmse_only_fails(row) -> bool:
    """torch._dynamo.utils.same(fp64_ref) on the row's metrics, with the applied policy tolerance as tol."""
    if row.vs_golden is None or row.reference_vs_golden is None or row.applied is None:
        return not row.passed  # structural / exact rows: both rules agree
    if row.vs_reference.mismatches == 0:
        return False
    tol = row.applied.tolerance.atol
    m = 3.0 if row.dtype in ("float16", "bfloat16") or row.vs_golden.numel < 1000 else 2.0
    return row.vs_golden.rmse > m * row.reference_vs_golden.rmse + tol / 10


def summarize(report) -> dict:
    margins = {c: 0.0 for c in CHECKS}
    worst_row = {}
    for r in report.rows:
        for c, v in r.verdict.margins.items():
            if v > margins.get(c, 0.0):
                margins[c], worst_row[c] = v, r.name
    ratios = [r.error_ratio for r in report.rows if r.error_ratio is not None]
    # rows the golden checks judged (not passed by the tolerance shortcut, which torch.same shares)
    judged = [r for r in report.rows if r.error_ratio is not None
              and r.verdict.code not in ("within_tolerance", "bitwise_equal")]
    large = [r.error_ratio for r in judged if r.vs_golden.numel >= SMALL_TENSOR]
    return {"status": report.status, "fails": [f"{r.name}: {r.verdict.message}" for r in report.rows if not r.passed],
            "fail_codes": sorted({r.verdict.code for r in report.rows if not r.passed}),
            "max_judged_rmse_ratio": max((r.error_ratio for r in judged), default=0.0),
            "max_judged_rmse_ratio_large": max(large, default=0.0),
            "rmse_only_fails": [r.name for r in report.rows if rmse_only_fails(r)],
            "margins": margins, "margin_rows": worst_row, "max_rmse_ratio": max(ratios, default=0.0),
            "rows": len(report.rows), "decisions": [n for n in report.notes if n.startswith("decisions:")]}


def one_run(model, dtype, train, seed, device, plant_spec=None) -> dict:
    case = build(model, seed)
    if plant_spec:
        case = plant(case, *plant_spec)
    t = time.perf_counter()
    report = run_check(case, backend="inductor", dtype=dtype, device=device, train=train, seed=seed)
    out = summarize(report)
    out.update(model=model, dtype=dtype, train=train, seed=seed, seconds=round(time.perf_counter() - t, 1))
    if plant_spec:
        out["plant"], out["strength"] = plant_spec
    return out


def parse_seeds(text: str) -> list[int]:
    seeds = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi or lo) + 1))
    return seeds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--modes", default="fwd,train")
    p.add_argument("--part", default="both", choices=["stability", "power", "both"])
    p.add_argument("--plants", default=",".join([*PLANTS, *LINEAR_PLANTS]))
    p.add_argument("--power-dtypes", default="fp32,bf16", help="power is always --train, in these dtypes")
    p.add_argument("--quick", action="store_true",
                   help="stability: bf16 --train only; power: two or three strengths per plant")
    p.add_argument("--json", help="write all results here")
    p.add_argument("--jsonl", help="append each run's result here as it finishes; runs already there are skipped "
                                   "(a grid cut short by a time limit resumes where it stopped)")
    p.add_argument("--jobs", type=int, default=1, help="run the grid in this many processes, one (model, dtype, "
                                                        "mode) or (plant, model) group each; needs --jsonl")
    p.add_argument("--threads", type=int, default=0, help="torch threads per process (0: torch's default)")
    p.add_argument("--table", metavar="JSONL", nargs="+", help="print the markdown tables of these results and exit")
    a = p.parse_args(argv)
    if a.table:
        print(tables([json.loads(line) for f in a.table for line in Path(f).read_text().splitlines() if line.strip()]))
        return 0
    if a.jobs > 1:
        if not a.jsonl:
            print("error: --jobs needs --jsonl", file=sys.stderr)
            return 2
        return run_parallel(a, argv if argv is not None else sys.argv[1:])
    if a.threads:
        torch.set_num_threads(a.threads)
    models = a.models.split(",")
    if unknown := [m for m in models if m not in MODELS]:
        print(f"error: unknown models {unknown}; known: {MODELS}", file=sys.stderr)
        return 2
    if unknown := [k for k in a.plants.split(",") if k not in QUICK]:
        print(f"error: unknown plants {unknown}; known: {sorted(QUICK)}", file=sys.stderr)
        return 2
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("error: needs transformers (pip install -e '.[models]')", file=sys.stderr)
        return 2
    seeds = parse_seeds(a.seeds)
    dtypes, modes = (["bf16"], ["train"]) if a.quick else (a.dtypes.split(","), a.modes.split(","))
    results = {"device": a.device, "torch": torch.__version__, "seeds": seeds, "stability": [], "power": []}
    done = _done(a.jsonl)

    def record(part: str, r: dict) -> None:
        results[part].append(r)
        if a.jsonl:
            with open(a.jsonl, "a") as f:
                f.write(json.dumps({"part": part, "device": a.device, **r}) + "\n")

    if a.part in ("stability", "both"):
        for model in models:
            for dtype in dtypes:
                for mode in modes:
                    for seed in seeds:
                        if ("stability", model, dtype, mode == "train", seed, None, None) in done:
                            continue
                        r = one_run(model, dtype, mode == "train", seed, a.device)
                        record("stability", r)
                        print(f"stability {model:8s} {dtype:5s} {mode:5s} seed {seed}: {r['status']}"
                              f" rmse-only {'FAIL' if r['rmse_only_fails'] else 'PASS'}"
                              f" margins {json.dumps({k: round(v, 3) for k, v in r['margins'].items()})}"
                              f" ({r['seconds']}s)" + "".join(f"\n    {f}" for f in r["fails"]), flush=True)
    if a.part in ("power", "both"):
        for kind in a.plants.split(","):
            for model in models:
                for dtype in a.power_dtypes.split(","):
                    for strength in strengths_of(kind, a.quick):
                        for seed in seeds:
                            if ("power", model, dtype, True, seed, kind, strength) in done:
                                continue
                            r = one_run(model, dtype, True, seed, a.device, (kind, strength))
                            record("power", r)
                            print(f"power {kind}={strength:g} {model:8s} {dtype:5s} seed {seed}: verdict "
                                  f"{r['status']} rmse-only {'FAIL' if r['rmse_only_fails'] else 'PASS'} max judged"
                                  f" rmse ratio {r['max_judged_rmse_ratio']:.3g} ({r['seconds']}s)", flush=True)
    return finish(results, a.json)


def finish(results: dict, json_path: str | None) -> int:
    """The summary printed, and everything written to `json_path` when given."""
    results["summary"] = summary(results)
    print(json.dumps(results["summary"], indent=1))
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=1))
    return 0


def _key(r: dict) -> tuple:
    return (r["part"], r["model"], r["dtype"], r["train"], r["seed"], r.get("plant"), r.get("strength"))


def _done(jsonl: str | None) -> set[tuple]:
    if not jsonl or not Path(jsonl).exists():
        return set()
    return {_key(json.loads(line)) for line in Path(jsonl).read_text().splitlines() if line.strip()}


def run_parallel(a, argv: list[str]) -> int:
    """The grid split into groups, each in its own process (`--jobs 1` on one group), `a.jobs` at a time;
    then the summary over everything in the JSONL file (this run's and earlier ones')."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor
    quick = ["--quick"] if a.quick else []
    common = ["--device", a.device, "--seeds", a.seeds, "--jsonl", a.jsonl, "--threads", str(a.threads or 1)] + quick
    dtypes, modes = (["bf16"], ["train"]) if a.quick else (a.dtypes.split(","), a.modes.split(","))
    groups = []
    if a.part in ("stability", "both"):
        groups += [["--part", "stability", "--models", m, "--dtypes", d, "--modes", mo]
                   for m in a.models.split(",") for d in dtypes for mo in modes]
    if a.part in ("power", "both"):
        groups += [["--part", "power", "--plants", k, "--models", m, "--power-dtypes", d]
                   for k in a.plants.split(",") for m in a.models.split(",") for d in a.power_dtypes.split(",")]
    script = str(Path(__file__).resolve())

    def one(group):
        proc = subprocess.run([sys.executable, script, *common, *group], capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("stability", "power", "    "))]
        print("\n".join(lines) + (f"\n  group {group} exited {proc.returncode}: {proc.stderr[-400:]}"
                                   if proc.returncode else ""), flush=True)
    with ThreadPoolExecutor(a.jobs) as pool:
        list(pool.map(one, groups))
    rows = [json.loads(line) for line in Path(a.jsonl).read_text().splitlines() if line.strip()]
    results = {"device": a.device, "torch": torch.__version__, "seeds": parse_seeds(a.seeds),
               "stability": [r for r in rows if r["part"] == "stability"],
               "power": [r for r in rows if r["part"] == "power"]}
    return finish(results, a.json)


def caught_without_rmse(r: dict) -> bool:
    """A FAIL in which no failing row failed the RMSE check: what the other checks (MeanRel, MaxRel per
    octave, small values) caught and an RMSE-only rule cannot (read from the rows' failure texts)."""
    return r["status"] != "PASS" and not any(re.search(r"\brmse [-+.\de]+ vs eager", f) for f in r["fails"])


def tables(rows: list[dict]) -> str:
    """Markdown: per (model, dtype, mode) the runs, FAILs (with seeds), torch-rule FAILs, runs whose golden
    followed a near-tied decision, and each check's largest ratio to its limit; per plant and strength the
    detection rates."""
    from tabulate import tabulate
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["part"] == "stability":
            groups.setdefault((r["model"], r["dtype"], "train" if r["train"] else "fwd"), []).append(r)
    st = []
    for (model, dtype, mode), rs in sorted(groups.items(), key=lambda kv: (MODELS.index(kv[0][0]), kv[0][1:])):
        fails = sorted(r["seed"] for r in rs if r["status"] != "PASS")
        failed = f"{len(fails)}" + (f" (seeds {','.join(map(str, fails))})" if fails else "")
        st.append([model, dtype, mode, len(rs), failed,
                   sum(bool(r["rmse_only_fails"]) for r in rs),
                   sum(any("near-tied" in n for n in r.get("decisions", [])) for r in rs),
                   *[round(max(r["margins"].get(c, 0.0) for r in rs), 2) for c in CHECKS]])
    out = tabulate(st, headers=["model", "dtype", "mode", "runs", "FAIL", "torch rule FAIL", "decisions followed",
                                *[f"max {c}" for c in CHECKS]], tablefmt="github") if st else ""
    power: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["part"] == "power":
            power.setdefault((r["plant"], r.get("dtype", "fp32"), r["strength"]), []).append(r)
    if power:
        def judged(r, key="max_judged_rmse_ratio"):
            return r.get(key, 0.0)
        pw = [[k, d, s, len(rs), sum(r["status"] != "PASS" for r in rs), sum(bool(r["rmse_only_fails"]) for r in rs),
               sum(caught_without_rmse(r) for r in rs),
               round(min(judged(r) for r in rs), 2), round(max(judged(r) for r in rs), 2),
               round(max((judged(r) for r in rs if r["status"] == "PASS"), default=0.0), 2),
               round(max((judged(r, "max_judged_rmse_ratio_large") for r in rs if r["status"] == "PASS"),
                         default=0.0), 2)]
              for (k, d, s), rs in sorted(power.items())]
        out += ("\n\n" if out else "") + tabulate(pw, headers=["plant", "dtype", "strength", "runs", "verdict caught",
                                               "torch rule caught", "caught without RMSE", "min judged ratio", "max judged ratio",
                                               "largest missed", f"largest missed (>= {SMALL_TENSOR:g} el.)"],
                                  tablefmt="github")
        out += "\n\n" + detection_by_ratio([r for rs in power.values() for r in rs])
    return out


RATIO_BINS = (0.0, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 10.0, math.inf)


def detection_by_ratio(runs: list[dict]) -> str:
    """Planted runs binned by their largest judged RMSE ratio (compiled's RMSE over eager's, on rows outside
    the tolerance; a run with every row within it is not counted), over every tensor and over tensors of
    SMALL_TENSOR elements or more: how many were caught.
    The smallest bin caught in full, and every bin above it, is the ratio the verdict catches 100%."""
    from tabulate import tabulate
    out = []
    for lo, hi in zip(RATIO_BINS, RATIO_BINS[1:]):
        row = [f"[{lo:g}, {hi:g})"]
        for key in ("max_judged_rmse_ratio", "max_judged_rmse_ratio_large"):
            rs = [r for r in runs if lo <= r.get(key, 0.0) < hi and r.get(key, 0.0) > 0]  # 0: nothing judged
            row += [len(rs), sum(r["status"] != "PASS" for r in rs)]
        out.append(row)
    return tabulate(out, headers=["judged RMSE ratio", "runs (any tensor)", "caught",
                                  f"runs (tensors >= {SMALL_TENSOR:g} el.)", "caught"], tablefmt="github")


def summary(results: dict) -> dict:
    st = results["stability"]
    out = {"stability_runs": len(st), "verdict_fail_runs": sum(r["status"] != "PASS" for r in st),
           "golden_check_fail_runs": sum("worse_than_eager" in r.get("fail_codes", []) for r in st),
           "nondeterministic_compiled_runs": sum("nondeterministic_compiled" in r.get("fail_codes", []) for r in st),
           "rmse_only_fail_runs": sum(bool(r["rmse_only_fails"]) for r in st),
           "runs_with_followed_decisions": sum(any("near-tied" in n for n in r.get("decisions", [])) for r in st),
           "largest_margin_per_check": {c: max((r["margins"].get(c, 0.0) for r in st), default=0.0) for c in CHECKS}}
    power = {}
    for r in results["power"]:
        key = f"{r['plant']}={r['strength']:g} {r.get('dtype', 'fp32')}"
        e = power.setdefault(key, {"runs": 0, "verdict_caught": 0, "rmse_only_caught": 0, "min_rmse_ratio": None})
        e["runs"] += 1
        e["verdict_caught"] += r["status"] != "PASS"
        e["rmse_only_caught"] += bool(r["rmse_only_fails"])
        e["min_rmse_ratio"] = min(r["max_rmse_ratio"], e["min_rmse_ratio"] or float("inf"))
    out["power"] = power
    caught_all = [r["max_rmse_ratio"] for r in results["power"]]
    missed = [r.get("max_judged_rmse_ratio", 0.0) for r in results["power"] if r["status"] == "PASS"]
    out["largest_judged_rmse_ratio_missed"] = max(missed, default=None)  # outside tolerance, yet PASS
    out["runs_with_judged_rmse_ratio_ge_3_missed"] = sum(x >= 3 for x in missed)
    out["runs_with_judged_rmse_ratio_ge_3_on_large_tensors_missed"] = sum(
        r.get("max_judged_rmse_ratio_large", 0.0) >= 3 for r in results["power"] if r["status"] == "PASS")
    out["power_runs"] = len(caught_all)
    return out


if __name__ == "__main__":
    sys.exit(main())
