"""GPU half of issue 20's Triton example: `fusecheck op` on the Triton RMSNorm and its planted bugs, on CUDA (no
interpreter), with bigger shapes than the CPU tests, results as one JSON file.

    python benchmarks/gpu_op_triton.py OUT.json [--quick]
    python benchmarks/gpu_op_triton.py OUT.json --cpu-smoke   # the plumbing only: CPU interpreter, tiny shapes

Every check is `python -m fusecheck op ... --device cuda` in a subprocess (TRITON_INTERPRET removed from its
environment); the JSON has, per check, the command, exit code, verdict, the failing dtype[shape] keys, what was
expected, whether it matched, the failure rates and the wall time; then tests/op/test_op_triton.py under pytest.
Exit 0 when every check matched its expectation (the two bf16-accumulation checks record what the verdict
does; only the block-32 one is expected to FAIL, as measured on CPU). ~5-10 min on one H200 (most of it Triton compiles).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "kernels/op_triton_rmsnorm.py:TritonRMSNorm"
BUGS = "tests/planted/op_triton_bugs.py:"
# hidden sizes of real models (4096, 5120, 8192 divide 1024) and ones that do not (4099, 11008 = 10.75 blocks,
# 1000 < one block)
SMOKE = [{"rows": 2, "hidden": 4096}, {"rows": 2, "hidden": 4099}, {"rows": 2, "hidden": 1000}]
BIG = [{"rows": 64, "hidden": 4096}, {"rows": 32, "hidden": 8192}, {"rows": 48, "hidden": 5120},
       {"rows": 33, "hidden": 4099}, {"rows": 16, "hidden": 11008}, {"rows": 8, "hidden": 1000}]


def shape_args(shapes):
    out = []
    for s in shapes:
        out += ["--shape", ",".join(f"{k}={v}" for k, v in s.items())]
    return out


def key(dtype, shape):
    return f"{dtype}[{','.join(f'{k}={v}' for k, v in shape.items())}]"


def tails(dtypes, shapes, block):
    return sorted(key(d, s) for d in dtypes for s in shapes if s["hidden"] % block)


def checks(quick: bool, smoke: bool = False):
    big = SMOKE if smoke else BIG[:1] + BIG[3:5] if quick else BIG
    all3 = ["fp32", "bf16", "fp16"]
    yield ("correct_default_shapes", [KERNEL, "--dtype", "fp32,bf16,fp16", "--repeat", "3"], "PASS", [])
    for block in (1024, 32):
        yield (f"correct_big_block{block}", [KERNEL, "--spec-arg", f"block={block}", "--dtype", "fp32,bf16,fp16",
                                             "--repeat", "5", *shape_args(big)], "PASS", [])
    yield ("correct_rate_bound_0.05", [KERNEL, "--spec-arg", "block=1024", "--dtype", "bf16", "--no-probes",
                                       "--rate-bound", "0.05", *shape_args(big[1:2] if smoke else BIG[3:4])], "PASS", [])
    yield ("tail_dropped_default_shapes", [BUGS + "TritonTailDropped", "--dtype", "fp32,bf16,fp16", "--repeat", "1"],
           "FAIL", "tails:default")
    # a tail of 3 columns in 4099 moves rstd by ~4e-4 relative: below bf16/fp16 output rounding, so those may
    # pass (measured on CPU with 2 rows); what must hold: only non-dividing shapes fail, and every fp32 one does
    yield ("tail_dropped_big_block1024", [BUGS + "TritonTailDropped", "--spec-arg", "block=1024", "--dtype",
                                          "fp32,bf16,fp16", "--repeat", "1", *shape_args(big)],
           "FAIL", {"subset_of": tails(all3, big, 1024), "includes": tails(["fp32"], big, 1024)})
    # measured, not a promise: bf16 accumulation is caught on CPU at hidden 4096 / block 32 (128 adds per lane),
    # not with 4 adds per lane (block 1024); fp16 accumulation was never caught
    yield ("bf16_acc_block32", [BUGS + "TritonLowPrecisionAcc", "--spec-arg", "block=32", "--dtype", "fp32,bf16,fp16",
                                "--repeat", "1", "--no-probes", *shape_args(big)], "FAIL", None)
    yield ("bf16_acc_block1024", [BUGS + "TritonLowPrecisionAcc", "--spec-arg", "block=1024", "--dtype",
                                  "fp32,bf16,fp16", "--repeat", "1", "--no-probes", *shape_args(big)], None, None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="JSON file to write")
    ap.add_argument("--quick", action="store_true", help="three big shapes instead of six")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="run the same checks on CPU under TRITON_INTERPRET=1 with tiny shapes (tests the script)")
    args = ap.parse_args()
    import torch
    device = "cpu" if args.cpu_smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu_op_triton: no CUDA device; this script is the GPU run (the CPU interpreter run is "
              "tests/op/test_op_triton.py)", file=sys.stderr)
        return 2
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if args.cpu_smoke:
        env["TRITON_INTERPRET"] = "1"
        os.environ["TRITON_INTERPRET"] = "1"
    import triton
    sys.path.insert(0, str(ROOT / "kernels"))
    import op_triton_rmsnorm
    default_tails = tails(["fp32", "bf16", "fp16"], op_triton_rmsnorm.TritonRMSNorm.shapes, 32)
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (TRITON_INTERPRET=1)", "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), "checks": []}
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv, want, want_failing in checks(args.quick, args.cpu_smoke):
            if want_failing == "tails:default":
                want_failing = default_tails
            js = Path(tmp) / f"{name}.json"
            cmd = [sys.executable, "-m", "fusecheck", "op", *argv, "--device", device, "--json", str(js), "-q"]
            t0 = time.monotonic()
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            wall = time.monotonic() - t0
            data = json.loads(js.read_text()) if js.exists() else {}
            rows = data.get("rows", [])
            bad = sorted({r["name"].split(".")[0] for r in rows if r["verdict"]["status"] != "PASS"})
            bad_rows = [{"name": r["name"], "status": r["verdict"]["status"], "code": r["verdict"].get("code"),
                         "message": r["verdict"].get("message")}
                        for r in rows if r["verdict"]["status"] != "PASS"][:40]
            status = data.get("status", f"no JSON (exit {proc.returncode})")
            if isinstance(want_failing, dict):
                keys_ok = set(want_failing["includes"]) <= set(bad) <= set(want_failing["subset_of"])
            else:
                keys_ok = want_failing is None or bad == sorted(want_failing)
            matched = (want is None or status == want) and keys_ok
            ok &= matched
            result["checks"].append({"name": name, "command": " ".join(cmd[2:]), "exit": proc.returncode,
                                     "status": status, "expected": want, "failing_keys": bad,
                                     "expected_failing_keys": want_failing, "matched": matched,
                                     "failing_rows": bad_rows, "rates": data.get("rates", {}).get("overall"),
                                     "rows": len(rows), "wall_s": round(wall, 1),
                                     "stderr_tail": proc.stderr[-1500:] if proc.returncode not in (0, 1) else ""})
            print(f"{name:32s} {status:6s} expected {want} matched={matched} failing={bad} ({wall:.0f} s)",
                  flush=True)
            Path(args.out).write_text(json.dumps(result, indent=1))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/op/test_op_triton.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    result["pytest"] = {"exit": proc.returncode, "tail": proc.stdout[-2000:], "wall_s": round(time.monotonic() - t0, 1)}
    ok &= proc.returncode == 0
    print(f"pytest tests/op/test_op_triton.py: exit {proc.returncode}", flush=True)
    result["all_matched"] = ok
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"all matched: {ok}; wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
