"""Benchmark: the comparison core against torch.testing.assert_close and against the same metrics computed
as separate fp64 torch ops, on the same tensors in the same run.

    python benchmarks/compare.py [--device cuda] [--sizes 1e6,1.6e7] [--modes auto,on_device,eager,compiled,triton,cpu_core]
                                 [--threads N] [--out results.md]

What each contender computes:
- fusecheck.compare: result vs eager vs golden — three pairs, ~19 metrics each, verdict; chunked. Modes:
  `eager` (the torch core: FUSECHECK_COMPILED_COMPARE=0, FUSECHECK_TRITON_COMPARE=0, FUSECHECK_CPU_CORE=0),
  `compiled` (the Inductor kernel; its one-time compile is the first call), `triton` (the hand-written Triton
  kernel, CUDA only; its first call compiles and self-checks), `cpu_core` (the C core on CPU; its first call
  builds it into an empty cache), `auto` (the defaults: Triton on CUDA, the C core on CPU, and tensors under
  2^16 elements on an accelerator compared on a host copy), `on_device` (`auto` without that host copy).
- read once: one reduction over each of the three tensors, the least any comparison must do; the
  effective bandwidth is the three tensors' bytes over fusecheck.compare's time.
- assert_close: one pair (result vs eager), allclose only (the cheapest thing a CI could do).
- separate fp64 ops: the same three pairs' main metrics (rmse, max abs/rel, mean rel, cosine, ULP,
  mismatches) written as whole-tensor fp64 torch expressions, the obvious hand-rolled alternative.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fusecheck from the repo root, installed or not

from fusecheck.compare import compare
from fusecheck.compare import host
from fusecheck.compare.cores import c_core, inductor_core, triton_core


def naive_metrics(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> dict[str, float]:
    a, b = a.double(), b.double()
    d = (a - b).abs()
    rel = d / (b.abs() + torch.finfo(torch.float64).eps)
    eb = torch.clamp(torch.floor(torch.log2(b.abs().clamp_min(1e-300))), min=-126)
    return {
        "rmse": d.square().mean().sqrt().item(), "max_abs": d.max().item(), "max_rel": rel.max().item(),
        "mean_rel": rel.mean().item(), "cos": (torch.dot(a, b) / (a.norm() * b.norm())).item(),
        "ulp": (d * torch.exp2(7 - eb)).max().item(), "mismatch": (d > atol + rtol * b.abs()).sum().item(),
        "nan": (torch.isnan(a) != torch.isnan(b)).sum().item(),
    }


def naive_three_pairs(res, ref, gold):
    return [naive_metrics(res, ref, 5e-3, 5e-3), naive_metrics(res, gold, 5e-3, 5e-3), naive_metrics(ref, gold, 5e-3, 5e-3)]


def assert_close(res, ref):
    try:
        torch.testing.assert_close(res, ref, rtol=5e-3, atol=5e-3)
    except AssertionError:
        pass


def timeit(fn, device: str, repeat: int, warmup: bool = True) -> float:
    """Median of `repeat` timed calls after a warm-up call; repeat=0 with warmup=False times one cold call."""
    if warmup:
        fn()
    times = []
    for _ in range(max(repeat, 1)):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def peak_extra_bytes(fn, device: str) -> int | None:
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def read_once(res, ref, gold) -> None:
    for t in (res, ref, gold):
        t.sum(dtype=torch.float32 if t.dtype != torch.float64 else torch.float64)


# mode -> the switches it sets (the others unset: their defaults)
# (each core mode keeps every tensor on its device; `auto` copies small accelerator tensors to the host,
# `on_device` is `auto` without that copy)
_OFF = {inductor_core.ENV: "0", triton_core.ENV: "0", c_core.ENV: "0", host.ENV: "0"}
MODES = {"auto": {}, "on_device": {host.ENV: "0"}, "eager": dict(_OFF), "compiled": {**_OFF, inductor_core.ENV: "1"},
         "triton": {**_OFF, triton_core.ENV: "1"}, "cpu_core": {**_OFF, c_core.ENV: "1"}}


_SCRATCH = tempfile.TemporaryDirectory(prefix="fusecheck-bench-")  # cold caches, removed at exit


def set_mode(mode: str) -> None:
    for name in _OFF:
        os.environ.pop(name, None)
    os.environ.update(MODES[mode])
    if mode == "cpu_core":  # a cold first call: the C core is built into an empty cache
        os.environ[c_core.CACHE_ENV] = tempfile.mkdtemp(dir=_SCRATCH.name)
        c_core.forget()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sizes", default="1e6,1.6e7")
    ap.add_argument("--modes", default="auto", help="comma-separated: " + ", ".join(MODES))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (on a shared machine, 1 "
                    "avoids OpenMP spin-waits that make 2-thread timings swing 10-30x)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    modes = args.modes.split(",")
    rows = [f"device: {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, bf16 result/eager, "
            f"fp64 golden, median of {args.repeat}, load average at start {os.getloadavg()[0]:.2f}", "",
            "| elements | mode | fusecheck.compare (3 pairs, all metrics) | first call | effective read bandwidth "
            "| read once | assert_close (1 pair) | separate fp64 ops (3 pairs) | ratio to read once "
            "| ratio to assert_close | ratio to fp64 ops | extra memory: fusecheck / fp64 ops |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for size in [int(float(s)) for s in args.sizes.split(",")]:
        g = torch.randn(size, dtype=torch.float64, device=args.device)
        ref = g.to(torch.bfloat16)
        res = (g * (1 + 1e-3 * torch.randn_like(g))).to(torch.bfloat16)
        nbytes = sum(t.numel() * t.element_size() for t in (res, ref, g))
        once = timeit(lambda: read_once(res, ref, g), args.device, args.repeat)
        ac = timeit(lambda: assert_close(res, ref), args.device, args.repeat)
        naive = timeit(lambda: naive_three_pairs(res, ref, g), args.device, args.repeat)
        m_naive = peak_extra_bytes(lambda: naive_three_pairs(res, ref, g), args.device)
        for mode in modes:
            set_mode(mode)
            first = timeit(lambda: compare(res, ref, g), args.device, 0, warmup=False)
            label = f"{mode} (FELL BACK: {len(triton_core._failed)} variant(s))" if (
                mode in ("auto", "triton") and triton_core._failed) else mode
            ours = timeit(lambda: compare(res, ref, g), args.device, args.repeat)
            m_ours = peak_extra_bytes(lambda: compare(res, ref, g), args.device)
            mem = "-" if m_ours is None else f"{m_ours / 2**20:.0f} MiB / {m_naive / 2**20:.0f} MiB"
            rows.append(f"| {size:,} | {label} | {ours * 1e3:.1f} ms | {first * 1e3:.0f} ms | "
                        f"{nbytes / ours / 1e9:.3g} GB/s | {once * 1e3:.1f} ms | {ac * 1e3:.1f} ms | "
                        f"{naive * 1e3:.1f} ms | {ours / once:.2f}x | {ours / ac:.2f}x | {ours / naive:.2f}x | {mem} |")
            print(rows[-1], flush=True)
    text = "\n".join(rows)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
