"""Micro-benchmark of the Triton comparison kernel alone (CUDA): the one-pass partials of three pairs (bf16
result and eager, fp64 golden), the abs-max pre-pass, and reading the three tensors once, per launch shape.

    python benchmarks/triton_core.py [--sizes 2.7e8] [--sweep] [--repeat 5] [--best-out best.txt]

Every shape is first checked against the eager core on a prefix (counts and maxima equal, sums to 1e-9): a
fast wrong kernel is reported as WRONG, never timed as a result. `--sweep` tries several launch shapes;
`--best-out` writes the fastest correct one as FUSECHECK_TRITON_CONFIG's value (BLOCK,WARPS,PROGRAMS_PER_SM),
for benchmarks/compare.py to run with.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fusecheck from the repo root, installed or not

from fusecheck.compare.cores import torch_core, triton_core  # noqa: E402
from fusecheck.compare.metrics import octave_base, ulp_format  # noqa: E402

SWEEP = [(32, 1, 4), (32, 1, 6), (32, 1, 8), (32, 1, 12), (64, 2, 2), (64, 2, 4), (128, 4, 1), (128, 4, 2),
         (128, 4, 3), (256, 8, 1)]
PAIRS = ((0, 1), (0, 2), (1, 2))


def timed(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cuda_or_exit(script: str) -> torch.device:
    """The CUDA device, or one line and exit 2 (these benchmarks time GPU kernels)."""
    if not torch.cuda.is_available():
        print(f"{script}: needs CUDA and Triton", file=sys.stderr)
        sys.exit(2)
    return torch.device("cuda")


def bf16_params(dev: torch.device):
    """The kernels' parameters for a bf16 comparison (fparams, iparams, and their kernel forms)."""
    mant, min_eb = ulp_format(torch.bfloat16)
    fp, ip = torch_core.params(torch.float64, mant=mant, min_eb=min_eb, rtol=5e-3, atol=5e-3, small_threshold=2.0 ** -20,
                          small_atol=5e-3, octave_base=octave_base(2.0 ** -20))
    return fp, ip, triton_core._fconsts(fp, dev), tuple(ip.tolist())


def registers() -> str:
    """Registers and spills of the compiled kernels, exact and fast (best effort: Triton's cache layout varies)."""
    try:
        from fusecheck.compare.cores import triton_fast_kernel, triton_kernels
        out = []
        for name, jit in (("exact", triton_kernels.partials_kernel), ("fast", triton_fast_kernel.fast_kernel)):
            seen = {f"{k.n_regs}/{k.n_spills}" for cache in jit.device_caches.values()
                    for k in cache[0].values() if getattr(k, "n_regs", None) is not None}
            out.append(f"{name} {','.join(sorted(seen)) or '-'}")
        return "; ".join(out)
    except Exception:
        return "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2.7e8")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--best-out", default=None)
    args = ap.parse_args()
    dev = cuda_or_exit("benchmarks/triton_core.py")
    fp, ip, fconsts, ints = bf16_params(dev)
    configs = SWEEP if args.sweep else [triton_core.DEFAULT_CONFIG]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, bf16 result/eager, fp64 golden, "
          f"median of {args.repeat}")
    print("| elements | BLOCK,WARPS,PROGRAMS_PER_SM | partials (3 pairs) | first call | GB/s | ratio to read once "
          "| regs/spills | abs-max pre-pass | read once |")
    print("|---|---|---|---|---|---|---|---|---|")
    best = None
    for size in [int(float(s)) for s in args.sizes.split(",")]:
        g = torch.randn(size, dtype=torch.float64, device=dev)
        ref = g.to(torch.bfloat16)
        res = (g * (1 + 1e-3 * torch.randn_like(g))).to(torch.bfloat16)
        tensors = [res, ref, g]
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        once = timed(lambda: [t.sum(dtype=torch.float64 if t.dtype == torch.float64 else torch.float32)
                              for t in tensors], args.repeat)
        absmax = timed(lambda: triton_core._abs_max([ref, g]), args.repeat)
        for config in configs:
            triton_core.BLOCK, triton_core.NUM_WARPS, triton_core.PROGRAMS_PER_SM = config
            label = ",".join(map(str, config))
            t0 = time.perf_counter()
            try:
                ok = triton_core._self_check(tensors, PAIRS, fconsts, ints, fp, ip)
            except Exception as e:  # a shape that does not compile (registers, shared memory)
                print(f"| {size:,} | {label} | failed: {type(e).__name__}: {str(e)[:80]} |", flush=True)
                continue
            first = time.perf_counter() - t0
            if not ok:
                print(f"| {size:,} | {label} | WRONG (disagrees with the eager core) |", flush=True)
                continue
            t = timed(lambda: triton_core._raw_partials(tensors, PAIRS, fconsts, ints), args.repeat)
            print(f"| {size:,} | {label} | {t * 1e3:.2f} ms | {first:.1f} s | {nbytes / t / 1e9:.0f} | {t / once:.2f}x "
                  f"| {registers()} | {absmax * 1e3:.2f} ms | {once * 1e3:.2f} ms |", flush=True)
            if best is None or t < best[0]:
                best = (t, label)
        del g, ref, res, tensors
    if best and args.best_out:
        Path(args.best_out).write_text(best[1] + "\n")
        print(f"fastest: {best[1]} ({best[0] * 1e3:.2f} ms) -> {args.best_out}")


if __name__ == "__main__":
    main()
