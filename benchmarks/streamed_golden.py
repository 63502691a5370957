"""Peak memory and time of a check, whole-model golden vs streamed, on real-size models.

Each configuration runs `fusecheck check` in its own process (a fresh allocator and a clean peak), with a
time limit; the child's peak resident memory comes from wait4, the device peak from the report's
per-phase `memory`. Results are appended as JSON lines, so a run cut short keeps what it measured.

    python benchmarks/streamed_golden.py --target models/wide_blocks.py:build_half_billion \
        --modes whole,streamed --out results.jsonl
    python benchmarks/streamed_golden.py --target models/scale.py:build_8b --device cuda --modes streamed --train
    # the code before this change, for "no slower than today": --baseline-tree /path/to/old/checkout
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_one(target: str, mode: str, device: str, train: bool, regional: bool, limit: float, extra: list[str],
            baseline_tree: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        target_path = str((ROOT / target.split(":")[0]).resolve()) + ":" + target.split(":")[1]
        args = [sys.executable, "-m", "fusecheck.cli.main", "check", target_path, "--device", device, "--json", str(report),
                "--time-limit", str(limit), *extra]
        if train:
            args.append("--train")
        cwd = str(ROOT)
        if mode == "before":  # the code before the streamed golden: no --golden flag, whole-model copy
            cwd = baseline_tree
        else:
            args += ["--golden", mode] + (["--regional"] if regional else [])
        env = dict(os.environ, PYTHONPATH=cwd + os.pathsep + str(ROOT))
        t = time.perf_counter()
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak resident set, not any earlier one's
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t
        data = json.loads(report.read_text()) if report.exists() else {}
    peaks = data.get("memory") or {}
    device_peak = max((p.get("device_peak_bytes", 0) for p in peaks.values()), default=0) or None
    return {"target": target, "mode": mode, "device": device, "train": train, "regional": regional,
            "exit_code": proc.returncode, "status": data.get("status"), "seconds": round(seconds, 1),
            "phase_seconds": data.get("seconds"), "model_bytes": data.get("model_bytes"),
            "device_peak_bytes": device_peak, "host_peak_rss_bytes": usage.ru_maxrss * 1024, "phase_peaks": peaks, "first_worse_block": data.get("first_worse_block"),
            "tail": out[-1500:] if proc.returncode not in (0, 1) else out[-300:]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True)
    p.add_argument("--modes", default="whole,streamed", help="comma list of whole, streamed, before")
    p.add_argument("--device", default="cpu")
    p.add_argument("--train", action="store_true")
    p.add_argument("--regional", action="store_true")
    p.add_argument("--time-limit", type=float, default=900)
    p.add_argument("--baseline-tree", default=None, help="a checkout of the code before the streamed golden")
    p.add_argument("--out", default=None, help="append JSON lines here")
    p.add_argument("extra", nargs="*", help="more `fusecheck check` arguments (after --)")
    a = p.parse_args()
    for mode in a.modes.split(","):
        r = run_one(a.target, mode, a.device, a.train, a.regional, a.time_limit, a.extra, a.baseline_tree)
        size = r["model_bytes"] or 0
        # the per-phase host peaks are reset inside the run (clear_refs), which also resets what wait4 reports
        host = max([r["host_peak_rss_bytes"] or 0] + [p.get("host_peak_rss_bytes", 0) for p in r["phase_peaks"].values()])
        r["host_peak_rss_bytes"] = host
        peak = r["device_peak_bytes"] or host
        r["peak_over_model"] = round(peak / size, 2) if size else None
        print(json.dumps({k: v for k, v in r.items() if k != "tail"}), flush=True)
        if r["exit_code"] not in (0, 1):
            print(r["tail"], file=sys.stderr)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
