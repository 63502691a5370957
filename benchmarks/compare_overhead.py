"""Where one compare() call's time goes beyond its kernels: each stage timed alone, the host-device
synchronisations counted, and the Python functions that cost the most -- on the same tensors as
benchmarks/compare.py, beside one assert_close (failing, as on that data, and passing).

    python benchmarks/compare_overhead.py --device cuda --sizes 1e6,1.6e7,2.7e8 [--repeat 30] [--profile 1e6]

Why: at 1e6-1.6e7 elements the kernels take a small part of a compare() on the H200 (issue 22: 1.7 ms
against 0.6 ms for assert_close); the fixed cost per call is launches, synchronisations and Python, and only
a breakdown says which.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fusecheck.compare as compare_module  # noqa: E402
from fusecheck.compare.cores import finite_abs_max  # noqa: E402
from fusecheck.compare.metrics import multi_pair_metrics  # noqa: E402
from fusecheck.compare.scale import applied_thresholds  # noqa: E402
from fusecheck.compare.verdict import judge  # noqa: E402
from fusecheck.policy import Policy  # noqa: E402


def compare(*args, **kwargs):
    """fusecheck.compare.compare, looked up at each call: --stages wraps it (and what it calls) in place."""
    return compare_module.compare(*args, **kwargs)


def timed(fn, device: str, repeat: int) -> float:
    """Median seconds of `repeat` calls after two warm-up calls, the device idle before and after each."""
    fn(), fn()
    times = []
    for _ in range(repeat):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def syncs(fn, device: str) -> int | None:
    """Host-device synchronisations in one call (torch's sync debug mode warns on each)."""
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def kernel_table(fn, repeat: int) -> list[str]:
    """Device time per call of each kernel in `fn` (torch.profiler), largest first, as table lines."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeat):
            fn()
        torch.cuda.synchronize()
    rows = sorted(((e.device_time_total / repeat, e.count // repeat, e.key) for e in prof.key_averages()
                   if e.device_time_total > 0), reverse=True)
    total = sum(r[0] for r in rows)
    return ["", f"  device kernels per call: {total:.1f} us in all", *(f"  {us:9.1f} us x{n} {name[:90]}"
                                                                    for us, n, name in rows[:12]), ""]


# functions timed inclusive of what they call (--stages): module, attribute
STAGES = [("fusecheck.compare", "compare"), ("fusecheck.compare", "metrics_at_scale"),
          ("fusecheck.compare", "_structural_check"), ("fusecheck.compare", "_finiteness_check"),
          ("fusecheck.compare", "Comparison"), ("fusecheck.compare.cores.triton_core", "launch"),
          ("fusecheck.compare.cores.triton_core", "_signature"),
          ("fusecheck.compare.scale", "applied_thresholds"), ("fusecheck.compare.scale", "finite_abs_max"),
          ("fusecheck.compare.scale", "multi_pair_metrics"), ("fusecheck.compare.scale", "multi_pair_metrics_at_scale"),
          ("fusecheck.compare.cores", "walk"), ("fusecheck.compare.cores", "walk_at_scale"),
          ("fusecheck.compare.cores.triton_core", "_partials"),
          ("fusecheck.compare.cores.triton_core", "_abs_max_partials"),
          ("fusecheck.compare.cores.triton_core", "_assemble"), ("fusecheck.compare.metrics", "_finalize_row"),
          ("fusecheck.compare", "judge"),
          ("fusecheck.compare.cores.torch_core", "params"), ("fusecheck.compare.host", "to_host"),
          ("triton.runtime.jit", "JITFunction.run"), ("torch", "Tensor.tolist"), ("torch", "Tensor.sum"),
          ("torch", "Tensor.amax"), ("torch", "cat"), ("torch", "empty"), ("torch", "tensor")]


@contextlib.contextmanager
def scale_first():
    """compare() as before the thresholds were derived on the device: the scale pass, its transfer, then the
    walk (the path every core without `walk_at_scale` takes)."""
    from fusecheck.compare import cores
    real = cores.walk_at_scale
    cores.walk_at_scale = lambda *a: None
    try:
        yield
    finally:
        cores.walk_at_scale = real


def stage_table(fn, repeat: int) -> list[str]:
    """Inclusive host time per compare() call of each function in STAGES (wrapped with a clock; the device
    is idle before each call, so a function that synchronises includes its wait)."""
    import importlib

    spent: dict[str, list[float]] = {}
    undo = []

    def wrap(owner, attr, label):
        real = getattr(owner, attr)

        def timed_call(*a, **k):
            t = time.perf_counter()
            try:
                return real(*a, **k)
            finally:
                spent.setdefault(label, []).append(time.perf_counter() - t)
        setattr(owner, attr, timed_call)
        undo.append((owner, attr, real))
    for module, dotted in STAGES:
        try:
            owner = importlib.import_module(module)
            *path, attr = dotted.split(".")
            for p in path:
                owner = getattr(owner, p)
            if hasattr(owner, attr):
                wrap(owner, attr, f"{module}.{dotted}")
        except (ImportError, AttributeError, TypeError):
            continue
    try:
        fn()
        spent.clear()
        for _ in range(repeat):
            torch.cuda.synchronize()
            fn()
        torch.cuda.synchronize()
    finally:
        for owner, attr, real in reversed(undo):
            setattr(owner, attr, real)
    return ["", "  host time per compare() call, inclusive (calls per compare):",
            *(f"  {sum(v) / repeat * 1e6:9.1f} us  x{len(v) / repeat:g}  {k}" for k, v in spent.items()), ""]


def assert_close(res, ref, tol):
    try:
        torch.testing.assert_close(res, ref, rtol=tol, atol=tol)
    except AssertionError:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sizes", default="1e6,1.6e7")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--profile", default=None, help="a size whose compare() is profiled function by function")
    ap.add_argument("--kernels", action="store_true",
                    help="list each device kernel's time per compare() call (torch.profiler, CUDA)")
    ap.add_argument("--stages", action="store_true",
                    help="host time per compare() of each stage, inclusive (functions wrapped with a clock; CUDA)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dev, policy = args.device, Policy()
    lines = [f"device: {dev}, torch {torch.__version__}, bf16 result/eager, fp64 golden, median of {args.repeat}", "",
             "| elements | compare() | syncs | assert_close failing / passing | ratio (failing) | compare(), scale "
             "first | scale pass | metrics walk | judge (Python) |", "|---|---|---|---|---|---|---|---|---|"]
    for size in [int(float(s)) for s in args.sizes.split(",")]:
        g = torch.randn(size, dtype=torch.float64, device=dev)
        ref = g.to(torch.bfloat16)
        res = (g * (1 + 1e-3 * torch.randn_like(g))).to(torch.bfloat16)
        applied = applied_thresholds(policy, torch.bfloat16, ref, g)
        tol = applied.tolerance
        kw = dict(ulp_dtype=torch.bfloat16, rtol=tol.rtol, atol=tol.atol, small_threshold=applied.small_threshold)
        pairs = {"vs_reference": (res, ref), "vs_golden": (res, g), "reference_vs_golden": (ref, g)}
        m = multi_pair_metrics(pairs, **kw)
        whole = timed(lambda: compare(res, ref, g, policy=policy), dev, args.repeat)
        with scale_first():
            before = timed(lambda: compare(res, ref, g, policy=policy), dev, args.repeat)
        fail = timed(lambda: assert_close(res, ref, 5e-3), dev, args.repeat)
        ok = timed(lambda: assert_close(res, ref, 1.0), dev, args.repeat)
        scale = timed(lambda: finite_abs_max([ref, g]), dev, args.repeat)
        walk = timed(lambda: multi_pair_metrics(pairs, **kw), dev, args.repeat)
        verdict = timed(lambda: judge(vs_reference=m["vs_reference"], vs_golden=m["vs_golden"],
                                      reference_vs_golden=m["reference_vs_golden"], tolerance=tol, policy=policy,
                                      exact=False, dtype=torch.bfloat16, small_threshold=applied.small_threshold),
                        "cpu", args.repeat)
        n_sync = syncs(lambda: compare(res, ref, g, policy=policy), dev)
        lines.append(f"| {size:,} | {whole * 1e3:.3f} ms | {'-' if n_sync is None else n_sync} | "
                     f"{fail * 1e3:.3f} / {ok * 1e3:.3f} ms | {whole / fail:.2f}x | {before * 1e3:.3f} ms ({before / fail:.2f}x) | "
                     f"{scale * 1e3:.3f} ms | "
                     f"{walk * 1e3:.3f} ms | {verdict * 1e3:.3f} ms |")
        print(lines[-1], flush=True)
        if args.kernels and dev == "cuda":
            lines += kernel_table(lambda: compare(res, ref, g, policy=policy), args.repeat)
        if args.stages and dev == "cuda":
            lines += stage_table(lambda: compare(res, ref, g, policy=policy), args.repeat)
        if args.profile and int(float(args.profile)) == size:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.repeat):
                compare(res, ref, g, policy=policy)
            prof.disable()
            buf = io.StringIO()
            stats = pstats.Stats(prof, stream=buf)
            stats.sort_stats("tottime").print_stats(20)
            stats.sort_stats("cumulative").print_stats(40)  # the tree: where the time beyond the stages goes
            profile = buf.getvalue()
    text = "\n".join(lines)
    if args.profile:
        text += (f"\n\ncProfile of {args.repeat} compare() calls at {args.profile} elements (by own time, then "
                 f"cumulative):\n\n```\n" + "\n".join(profile.strip().splitlines()) + "\n```")
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
