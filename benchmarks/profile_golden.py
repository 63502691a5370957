"""Where the golden's time goes: the streamed and the whole golden of one model, phase by phase, against the
bare fp64 arithmetic (a whole fp64 copy run forward, and backward with --train, with nothing around it).

For each --golden mode the check runs twice in this process (the first warms the compile and the comparison
core), the second with its golden phase under cProfile; the report prints each run's phase seconds, the bare arithmetic's seconds,
and the functions that took the golden's time (by own time and by cumulative time). Issue 22 measured the
streamed golden at 18-46x the whole copy's time on the H200; this is the tool that says why.

    python benchmarks/profile_golden.py --target models/scale.py:build_1b --device cuda --dtype bf16 --train
"""
from __future__ import annotations

import argparse
import copy
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _sync(device: str) -> None:
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def bare_fp64(target: str, device: str, dtype: str, train: bool, seed: int) -> float:
    """Seconds of one fp64 forward (and backward) of a deep copy, after one warm-up: the arithmetic alone."""
    import torch
    from fusecheck.case import load_target
    from fusecheck.devices import resolve_dtype
    case = load_target(target, seed)
    model = case.model.to(resolve_dtype(dtype))
    golden = copy.deepcopy(model).to(torch.float64)
    inputs = [x.to(torch.float64) if torch.is_tensor(x) and x.is_floating_point() else x for x in case.inputs]
    times = []
    for _ in range(2):
        _sync(device)
        t0 = time.perf_counter()
        out = golden(*inputs)
        if train:
            (out.float() if out.is_floating_point() else out).sum().backward()
        _sync(device)
        times.append(time.perf_counter() - t0)
        golden.zero_grad(set_to_none=True)
    del golden, model, case
    return times[-1]


def check_once(target: str, device: str, dtype: str, train: bool, seed: int, golden: str, backend: str,
               profile: cProfile.Profile | None):
    from fusecheck.case import load_target
    from fusecheck.check import run_check
    from fusecheck.policy import Policy
    import fusecheck.check.single as single
    case = load_target(target, seed)
    original = single.run_golden

    def profiled(*args, **kwargs):  # the golden phase alone: the compile is not what is measured
        profile.enable()
        try:
            return original(*args, **kwargs)
        finally:
            profile.disable()
    if profile is not None:
        single.run_golden = profiled
    t0 = time.perf_counter()
    try:
        report = run_check(case, backend=backend, dtype=dtype, device=device, train=train, seed=seed,
                           golden=golden, policy=Policy.load(None, search_from=ROOT))
    finally:
        single.run_golden = original
    wall = time.perf_counter() - t0
    data = report.to_dict()
    return wall, data.get("seconds") or {}, data.get("golden_mode"), report.status, len(report.rows)


def top(profile: cProfile.Profile, key: str, n: int) -> str:
    buf = io.StringIO()
    pstats.Stats(profile, stream=buf).strip_dirs().sort_stats(key).print_stats(n)
    return buf.getvalue()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="models/scale.py:build_1b")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--train", action="store_true")
    p.add_argument("--golden", default="streamed,whole")
    p.add_argument("--backend", default="aot_eager", help="the compile is not what is measured here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top", type=int, default=35)
    p.add_argument("--out", default=None, help="a folder for the .pstats files")
    a = p.parse_args(argv)
    bare = bare_fp64(a.target, a.device, a.dtype, a.train, a.seed)
    print(f"bare fp64 copy, {'forward+backward' if a.train else 'forward'}: {bare:.3f} s", flush=True)
    for mode in a.golden.split(","):
        wall, phases, chosen, status, rows = check_once(a.target, a.device, a.dtype, a.train, a.seed, mode,
                                                        a.backend, None)
        print(f"\n== --golden {mode} (ran {chosen}), warm-up: {status}, {rows} rows, {wall:.1f} s; phases "
              + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()), flush=True)
        prof = cProfile.Profile()
        wall, phases, chosen, status, rows = check_once(a.target, a.device, a.dtype, a.train, a.seed, mode,
                                                        a.backend, prof)
        print(f"== --golden {mode} (ran {chosen}), profiled: {status}, {wall:.1f} s; phases "
              + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()), flush=True)
        golden_s = phases.get("golden", float("nan"))
        print(f"   golden / bare fp64 = {golden_s / bare:.1f}x (profiled run; cProfile adds Python overhead)")
        print(top(prof, "tottime", a.top))
        print(top(prof, "cumulative", a.top))
        if a.out:
            Path(a.out).mkdir(parents=True, exist_ok=True)
            prof.dump_stats(str(Path(a.out) / f"golden_{mode}.pstats"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
