"""Training drift on real architectures: `fusecheck train` over many steps and seeds (issue 23), and the plants.

stability: stock Inductor (or --backend) on the built-in models and tiny transformers configs drawn by
  models/families.py, in bf16 (or --dtype), N steps at each seed: the verdict, the first step that left the
  band, the largest whole-model drift ratio to the band over the steps, and the time of each part.
plants: the planted training bugs of tests/planted/train_plants.py on the same targets: the step each is caught
  at, next to what the one-step `check --train` says of it.

    python benchmarks/train_drift.py --targets builtin,llama,gpt2 --seeds 0-2 --steps 50 --jsonl drift.jsonl
    python benchmarks/train_drift.py --part plants --targets builtin --steps 10
    python benchmarks/train_drift.py summary drift.jsonl
Only fusecheck.train.run.run_train and fusecheck.check.run_check are called.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUILTIN = ["models/mlp.py:build", "fusecheck/builtin/transformer_block.py:build", "models/conv_bn_relu.py:build"]
PLANTS = {  # plant -> (optimizer, optimizer compiled)
    "stale_weights": ("sgd", False), "bf16_masters": ("adamw", True),
    "double_update_every_3": ("adamw", True), "loss_scale_not_undone": ("sgd", True),
}


def seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def targets(text: str) -> list[str]:
    out = []
    for t in text.split(","):
        out += BUILTIN if t == "builtin" else [t]
    return out


def build(target: str, seed: int):
    """(case, spec): a FILE.py:NAME target seeded, or a models/families.py family drawn at the seed."""
    from fusecheck.case import load_target
    if ":" in target:
        return load_target(target, seed=seed), target
    from models.families import draw
    return draw(target, seed)[0], None


def one(target: str, seed: int, args, backend: str, **kw) -> dict:
    from fusecheck.train.run import run_train
    row = {"target": target, "seed": seed, "backend": backend, "dtype": args.dtype, "steps": args.steps, **kw}
    t = time.perf_counter()
    try:
        case, spec = build(target, seed)
    except Exception as exc:
        return {**row, "status": "SKIP", "reason": f"{type(exc).__name__}: {str(exc)[:200]}"}
    try:
        rep = run_train(case, spec=spec, steps=args.steps, dtype=args.dtype, backend=backend, seed=seed,
                        device=args.device, band_runs=args.band_runs, **kw)
    except Exception as exc:
        return {**row, "status": "ERROR", "reason": f"{type(exc).__name__}: {str(exc)[:300]}",
                "trace": traceback.format_exc(limit=3)[-600:]}
    d = rep.to_dict()
    ratios = [s["ratio"]["to_band"] for s in d["series"]]
    return {**row, "status": rep.status, "first_failed_step": rep.first_failed_step, "left_band": rep.left_band()[:6],
            "max_ratio_to_band": max(ratios), "final_losses": d["series"][-1]["losses"],
            "seconds": {k: round(v, 2) for k, v in rep.seconds.items()}, "wall_s": round(time.perf_counter() - t, 1)}


def check_passes(target: str, seed: int, args, backend: str) -> bool | None:
    from fusecheck.check import run_check
    try:
        case, _ = build(target, seed)
        return run_check(case, backend=backend, dtype=args.dtype, device=args.device, train=True, seed=seed).passed
    except Exception:
        return None


def emit(row: dict, out) -> None:
    print(json.dumps(row), flush=True)
    if out is not None:
        out.write(json.dumps(row) + "\n")
        out.flush()


def summary(paths: list[str]) -> int:
    from tabulate import tabulate
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line.strip()]
    table = []
    for r in rows:
        table.append([r["target"].removeprefix("models/"), r.get("plant", "-"), r["seed"], r["steps"], r["status"],
                      r.get("first_failed_step", ""), r.get("check_passes", ""),
                      f"{r['max_ratio_to_band']:.3g}" if "max_ratio_to_band" in r else "", r.get("wall_s", "")])
    print(tabulate(table, headers=["target", "plant", "seed", "steps", "status", "first step out", "check passes",
                                   "max ratio", "wall s"]))
    by = {}
    for r in rows:
        by.setdefault((r.get("plant", "-"), r["status"]), 0)
        by[(r.get("plant", "-"), r["status"])] += 1
    print("\n".join(f"{p} {s}: {n}" for (p, s), n in sorted(by.items())))
    return 0


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """How each training run is made: shared with train_stability.py."""
    p.add_argument("--seeds", type=seeds, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--device", default="cpu")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--band-runs", type=int, default=8)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "summary":
        return summary(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=["stability", "plants"], default="stability")
    p.add_argument("--targets", default="builtin,llama,gpt2,qwen2,bert", help="builtin, FILE.py:NAME or families")
    add_run_arguments(p)
    p.add_argument("--jsonl", default=None)
    args = p.parse_args(argv)
    out = open(args.jsonl, "a") if args.jsonl else None
    for target in targets(args.targets):
        for seed in args.seeds:
            if args.part == "stability":
                emit(one(target, seed, args, args.backend), out)
                continue
            for plant, (optimizer, compiled_step) in PLANTS.items():
                backend = f"tests/planted/train_plants.py:{plant}"
                row = one(target, seed, args, backend, optimizer=optimizer, compile_optimizer=compiled_step)
                emit({**row, "plant": plant, "check_passes": check_passes(target, seed, args, backend)}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
