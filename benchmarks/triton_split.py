"""The Triton comparison kernel launched per group of pairs: fewer accumulators per launch (more resident
warps) against reading the shared tensors again. Times `_raw_partials` per grouping and launch shape.

    python benchmarks/triton_split.py [--n 2.7e8] [--repeat 5]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.triton_core import bf16_params, cuda_or_exit, registers, timed  # noqa: E402
from fusecheck.compare.cores import triton_core  # noqa: E402

GROUPINGS = {"one launch": (((0, 1), (0, 2), (1, 2)),), "r-e, golden pairs": (((0, 1),), ((0, 2), (1, 2))),
             "one pair each": (((0, 1),), ((0, 2),), ((1, 2),))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=float, default=2.7e8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--per-sm", default="8,12,16,24")
    ap.add_argument("--groupings", type=int, default=len(GROUPINGS), help="time the first N groupings")
    args = ap.parse_args()
    dev = cuda_or_exit("benchmarks/triton_split.py")
    fp, ip, fconsts, ints = bf16_params(dev)
    n = int(args.n)
    g = torch.randn(n, dtype=torch.float64, device=dev)
    tensors = [(g * (1 + 1e-3 * torch.randn_like(g))).to(torch.bfloat16), g.to(torch.bfloat16), g]
    print(f"fast pass: {triton_core.fast_pass()} ({triton_core.FAST_ENV})")
    print("| grouping | programs per SM | time | tiles for the exact kernel | regs |")
    print("|---|---|---|---|---|")
    for name, groups in list(GROUPINGS.items())[:args.groupings]:
        for per_sm in (int(v) for v in args.per_sm.split(",")):
            triton_core.PROGRAMS_PER_SM = per_sm
            launches = []
            for pairs in groups:
                used = sorted({i for p in pairs for i in p})
                raws = [tensors[i] for i in used]
                local = tuple((used.index(a), used.index(b)) for a, b in pairs)
                launches.append((raws, local))
            ok = all(triton_core._self_check(r, p, fconsts, ints, fp, ip) for r, p in launches)
            t = timed(lambda: [triton_core._raw_partials(r, p, fconsts, ints) for r, p in launches], args.repeat)
            stats = [{} for _ in launches]
            for (r, p), st in zip(launches, stats):
                triton_core._raw_partials(r, p, fconsts, ints, stats=st)
            listed = " + ".join("-" if st["listed"] is None else f"{st['listed'] / st['tiles']:.2%}" for st in stats)
            print(f"| {name} | {per_sm} | {t * 1e3:.2f} ms{'' if ok else ' WRONG'} | {listed} | {registers()} |",
                  flush=True)


if __name__ == "__main__":
    main()
