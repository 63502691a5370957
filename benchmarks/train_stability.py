"""Stability grid of `fusecheck train` (issue 23): stock compile on models/families.py draws x seeds, one JSON line
per run, resumable (a (target, seed, steps, dtype, backend, device) already in the file is skipped).

    python benchmarks/train_stability.py --families bert,gpt2,llama,vit,t5,qwen2 --seeds 0-2 --steps 20 \
        --device cpu --jsonl benchmarks/results/train_cpu_families.jsonl
    python benchmarks/train_drift.py summary benchmarks/results/train_cpu_families.jsonl
Each row is benchmarks/train_drift.py's: status, first failing step, the quantities out of the band, the largest
whole-model drift ratio to the band over the steps, times; plus the rows the settling step (fusecheck/train/
settle.py) re-judged ("settled": step, name, PASS/FAIL) and the largest settle margin, so a near-flap shows.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_drift import add_run_arguments, build  # noqa: E402

KEY = ("target", "seed", "steps", "dtype", "backend", "device")


def run_one(target: str, seed: int, args) -> dict:
    from fusecheck.train.run import run_train
    row = {"target": target, "seed": seed, "steps": args.steps, "dtype": args.dtype, "backend": args.backend,
           "device": args.device, "band_runs": args.band_runs}
    settled = []

    def on_step(s):
        for name, j in s.judged.items():
            m = j.row.verdict.margins.get("band_count")
            if m is not None:
                settled.append({"step": s.step, "name": name, "status": j.row.verdict.status.value, "margin": m,
                                "flagged": j.row.verdict.message[:200]})
        print(f"  step {s.step} failed={s.failed[:3]}", flush=True)

    t = time.perf_counter()
    try:
        case, spec = build(target, seed)
        rep = run_train(case, spec=spec, steps=args.steps, dtype=args.dtype, backend=args.backend, seed=seed,
                        device=args.device, band_runs=args.band_runs, on_step=on_step)
    except Exception as exc:
        return {**row, "status": "ERROR", "reason": f"{type(exc).__name__}: {str(exc)[:300]}"}
    d = rep.to_dict()
    import torch
    return {**row, "torch": torch.__version__, "status": rep.status, "first_failed_step": rep.first_failed_step,
            "left_band": rep.left_band()[:6], "max_ratio_to_band": max(s["ratio"]["to_band"] for s in d["series"]),
            "settled": settled, "max_settle_margin": max((x["margin"] for x in settled), default=None),
            "final_losses": d["series"][-1]["losses"], "seconds": {k: round(v, 2) for k, v in rep.seconds.items()},
            "wall_s": round(time.perf_counter() - t, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", default="bert,gpt2,llama,vit,t5,qwen2")
    add_run_arguments(p)
    p.add_argument("--jsonl", required=True)
    args = p.parse_args(argv)
    out = Path(args.jsonl)
    done = set()
    if out.exists():
        done = {tuple(r.get(k) for k in KEY) for r in map(json.loads, out.read_text().splitlines()) if r}
    for seed in args.seeds:  # seeds outermost: every family gets seed 0 before any gets seed 2
        for fam in args.families.split(","):
            key = (fam, seed, args.steps, args.dtype, args.backend, args.device)
            if key in done:
                continue
            print(f"{fam} seed {seed}", flush=True)
            row = run_one(fam, seed, args)
            print(json.dumps(row), flush=True)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
