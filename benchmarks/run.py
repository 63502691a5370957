"""The one benchmark runner: named suites of benchmark commands, so a device session runs `run.py SUITE`
instead of a shell script written for that session.

    python benchmarks/run.py                        # the suites, one line each
    python benchmarks/run.py stability --device cuda --out $OUT [--jobs 14] [--dry-run]

Each suite is a list of steps (an argv with `{device}`, `{out}`, `{jobs}`, `{python}` filled in, a
time limit, and an environment). Steps run one after another; each step's output goes to `{out}/NAME.log`
and the last lines to the terminal; a step that fails or times out is reported and the next one runs (a
device call is too dear to end at the first failure). Resumable grids (stability, power, train) append to
a JSON lines file under `{out}`: the file of the same name in benchmarks/results/ is copied there first, so a
call cut short continues where the last one stopped; copy it back into benchmarks/results/ afterwards.
Results and tables: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
GRID_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]
    seconds: float = 600
    env: dict = field(default_factory=dict)
    resume: str | None = None   # a JSONL file name in benchmarks/results/ the step appends to


@dataclass(frozen=True)
class Suite:
    doc: str
    steps: tuple[Step, ...]


def _py(*args: str) -> tuple[str, ...]:
    return ("{python}", *args)


def _grid(name: str, part: str, *extra: str) -> Step:
    return Step(name, _py("benchmarks/verdict_stability.py", "--device", "{device}", "--part", part, *extra,
                          "--jobs", "{jobs}", "--threads", "1", "--jsonl", f"{{out}}/{name}.jsonl"),
                seconds=3600, env=GRID_ENV, resume=f"{name}.jsonl")


SUITES: dict[str, Suite] = {
    "compare": Suite("the comparison core against assert_close and separate fp64 ops (1e6, 1.6e7, 2.7e8 elements)", (
        Step("compare", _py("benchmarks/compare.py", "--device", "{device}", "--sizes", "1e6,1.6e7,2.7e8",
                            "--repeat", "5", "--out", "{out}/compare.md"), 300),
        Step("overhead", _py("benchmarks/compare_overhead.py", "--device", "{device}", "--sizes", "1e6,1.6e7,2.7e8",
                             "--repeat", "30", "--profile", "1e6", "--out", "{out}/compare_overhead.md"), 300),)),
    "park": Suite("parking a compiled run's results on the host: pinned against pageable, 8B-shaped gradients", (
        Step("park", _py("benchmarks/park_cost.py", "--device", "{device}", "--out", "{out}/park.md"), 300),)),
    "compare-triton": Suite("the Triton comparison kernel: its tests, a launch-shape sweep, then compare.py (CUDA)", (
        Step("tests", _py("-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/compare/test_compare_triton.py",
                          "tests/compare/test_compare_equivalence.py"), 200),
        Step("sweep", _py("benchmarks/triton_core.py", "--sizes", "1.6e7,2.7e8", "--sweep",
                          "--best-out", "{out}/best.txt"), 200),
        Step("split", _py("benchmarks/triton_split.py", "--per-sm", "8,12,16", "--groupings", "3"), 150),
        Step("compare", _py("benchmarks/compare.py", "--device", "cuda", "--sizes", "1e6,1.6e7,2.7e8",
                            "--modes", "eager,compiled,triton", "--repeat", "5", "--out", "{out}/compare_triton.md"),
             200))),
    "compare-cpu": Suite("the C comparison core on this host's CPU at 2 threads (the acceptance's core count)", (
        Step("tests", _py("-m", "pytest", "-q", "-n", "0", "tests/compare/test_cpu_core.py", "tests/compare/test_compare_equivalence.py",
                          "tests/compare/test_compare.py"), 180),
        Step("two_threads", _py("benchmarks/compare.py", "--sizes", "1e6,1.6e7", "--repeat", "5", "--modes",
                                "cpu_core,eager", "--threads", "2", "--out", "{out}/compare_cpu_t2.md"), 200))),
    "scale": Suite("the streamed golden at real sizes: 8B forward, 8B --train (regional), 1.1B --train", (
        Step("8b_forward", _py("benchmarks/streamed_golden.py", "--device", "{device}", "--out", "{out}/scale.jsonl",
                               "--target", "models/scale.py:build_8b", "--modes", "streamed", "--time-limit", "210"),
             240),
        Step("8b_train", _py("benchmarks/streamed_golden.py", "--device", "{device}", "--out", "{out}/scale.jsonl",
                             "--target", "models/scale.py:build_8b", "--modes", "streamed", "--train", "--regional",
                             "--time-limit", "200"), 230),
        Step("1b_train", _py("benchmarks/streamed_golden.py", "--device", "{device}", "--out", "{out}/scale.jsonl",
                             "--target", "models/scale.py:build_1b", "--modes", "whole,streamed", "--train",
                             "--time-limit", "150"), 330))),
    "stability": Suite("the verdict on drawn configs of every family (models/families.py), fp32/bf16, fwd/--train", (
        _grid("stability_{device}_draws", "stability", "--seeds", "0-3"),)),
    "power": Suite("planted degradations on the same draws, the verdict and torch's rule side by side", (
        _grid("power_{device}_draws", "power", "--quick", "--seeds", "0"),)),
    "train": Suite("fusecheck train over built-in models and drawn families, bf16, 20 steps", (
        Step("train_drift", _py("benchmarks/train_drift.py", "--device", "{device}", "--jsonl",
                                "{out}/train_{device}.jsonl"), 3600, GRID_ENV, "train_{device}.jsonl"),)),
    "op-triton": Suite("fusecheck op on the Triton RMSNorm and its planted bugs (CUDA)", (
        Step("op_triton", _py("benchmarks/gpu_op_triton.py", "{out}/op_triton_cuda.json", "--quick"), 600),)),
    "bisect": Suite("fusecheck bisect against torch's CompilerBisector on the planted culprits", (
        Step("bisect", _py("benchmarks/bisect_vs_torch.py", "--out", "{out}/bisect_vs_torch.md"), 900),)),
    "dist": Suite("fusecheck dist: checks per second against spawn-per-test, planted races' rates", (
        Step("dist", _py("benchmarks/dist.py", "--races", "--out", "{out}/dist.md"), 900),)),
    "vs-torch": Suite("fusecheck against torch's own accuracy check (fp64 copy + same()): time, peak, verdicts", tuple(
        Step(name, _py("benchmarks/vs_torch_accuracy.py", "--device", "{device}", "--targets", target, "--dtype", dtype,
                       *extra, "--golden", "auto,whole", "--timeout", "900", "--jsonl", "{out}/vs_torch_{device}.jsonl",
                       "--out", "{out}/vs_torch_{device}.md"), seconds, GRID_ENV)
        for name, target, dtype, extra, seconds in [
            ("vs_torch_block", "fusecheck/builtin/transformer_block.py:build", "fp32,bf16", (), 900),
            ("vs_torch_block_train", "fusecheck/builtin/transformer_block.py:build", "fp32,bf16", ("--train",), 900),
            ("vs_torch_0p5b", "models/wide_blocks.py:build_half_billion", "bf16", (), 2700),
            ("vs_torch_0p5b_train", "models/wide_blocks.py:build_half_billion", "bf16", ("--train",), 2700)])),
    "profile-golden": Suite("where the golden's time goes: streamed and whole against the bare fp64 arithmetic", (
        Step("profile_golden_1b_train", _py("benchmarks/profile_golden.py", "--target", "models/scale.py:build_1b",
                                            "--device", "{device}", "--train", "--out", "{out}/pstats_1b_train"), 400),
        Step("profile_golden_8b_8layers", _py("benchmarks/profile_golden.py", "--target", "models/scale.py:build_8b",
                                              "--device", "{device}", "--out", "{out}/pstats_8b_fwd"), 300,
             {"FUSECHECK_LAYERS": "8"}))),
    "gpu-tests": Suite("the tests that need a GPU, on it", (
        Step("tests", _py("-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/check/test_gpu.py",
                          "tests/compare/test_compare_triton.py", "tests/compare/test_host_small.py", "tests/runs/test_park.py", "tests/golden/test_decisions.py", "tests/check/test_precision_notes.py",
                          "tests/op/test_op_triton.py", "tests/check/test_settle.py", "tests/compare/test_noise_band.py",
                          "tests/toggles/test_promises.py"), 600,
             {"CI": "1"}),)),
}


def _fill(text: str, values: dict[str, str]) -> str:
    return text.format(**values)


def run_step(step: Step, values: dict[str, str], dry_run: bool) -> int:
    name = _fill(step.name, values)
    argv = [_fill(a, values) for a in step.argv]
    out = Path(values["out"])
    print(f"== {name}: {' '.join(argv)} (limit {step.seconds:g} s)", flush=True)
    if dry_run:
        return 0
    if step.resume:
        seed = RESULTS / _fill(step.resume, values)
        if seed.exists() and not (out / seed.name).exists():
            shutil.copy(seed, out / seed.name)  # resume: its finished runs are skipped
    started = time.monotonic()
    with open(out / f"{name}.log", "w") as log:
        try:
            rc = subprocess.run(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=step.seconds,
                                env={**os.environ, "PYTHONPATH": str(ROOT), **step.env}).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    tail = (out / f"{name}.log").read_text(errors="replace").splitlines()[-12:]
    print("\n".join(tail))
    print(f"== {name}: exit {rc} after {time.monotonic() - started:.0f} s", flush=True)
    return rc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("suite", nargs="?", choices=sorted(SUITES))
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--out", default=os.environ.get("OUT") or str(RESULTS), help="where logs and results go "
                   "(default: $OUT on a device machine, else benchmarks/results)")
    p.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                   help="shard processes for the grids")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = p.parse_args(argv)
    if args.suite is None:
        width = max(map(len, SUITES))
        print("\n".join(f"{name:<{width}}  {s.doc}" for name, s in SUITES.items()))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    values = {"device": args.device, "out": str(out), "jobs": str(args.jobs), "python": sys.executable}
    codes = [run_step(step, values, args.dry_run) for step in SUITES[args.suite].steps]
    return max(codes, default=0)


if __name__ == "__main__":
    sys.exit(main())
