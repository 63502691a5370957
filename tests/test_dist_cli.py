"""`fusecheck dist` command line: exit codes, the JSON report, and the torchrun entry point."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusecheck.distributed.cli import main

ROOT = Path(__file__).resolve().parents[1]
AG = "kernels/ag_gemm.py:AllGatherGemm"


def test_pass_writes_per_layer_per_rank_json(tmp_path, capsys):
    out = tmp_path / "d.json"
    assert main([AG, "--world-size", "2", "--repeat", "3", "--shape", "m=5,k=4,n=3", "--json", str(out)]) == 0
    assert "PASS" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["status"] == "PASS" and data["world_size"] == 2 and data["shapes"] == [{"m": 5, "k": 4, "n": 3}]
    assert set(data["layers"]) == {"comm", "compute", "whole"}
    assert data["repeat_stats"]["whole"]["runs"] == 3 and data["repeat_stats"]["whole"]["bound"].startswith("Wilson")
    runs = data["layers"]["whole"]["runs"]
    assert [(r["repeat"], sorted(r["ranks"])) for r in runs] == [(0, ["0", "1"]), (1, ["0", "1"]), (2, ["0", "1"])]
    assert all(v["comparison"]["verdict"]["status"] == "PASS" for r in runs for v in r["ranks"].values())
    comm = data["layers"]["comm"]["runs"][0]["ranks"]["1"]
    assert comm["comparison"]["verdict"]["code"] == "bitwise_equal" and comm["tag_dtype"] == "float32"
    assert data["diagnosis"]["cause"].startswith("none")


def test_fail_is_exit_1_with_diagnosis(tmp_path, capsys):
    out = tmp_path / "d.json"
    assert main(["tests/test_dist_planted.py:WrongRankOrder", "--world-size", "2", "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "diagnosis: communication" in text and "misrouted" in text
    assert json.loads(out.read_text())["layers"]["comm"]["status"] == "FAIL"


@pytest.mark.parametrize("argv, message", [
    (["kernels/nope.py:Nothing"], "not found"),
    (["kernels/ag_gemm.txt"], "must look like"),
    ([AG, "--shape", "m7"], "key=value"),
    ([AG, "--layers", "comm,magic"], "unknown layer"),
    (["kernels/symm_mem_ops.py:SymmMemAllGatherMatmul"], "needs CUDA GPUs"),
])
def test_bad_input_is_exit_2(argv, message, capsys):
    import torch
    if "symm_mem" in argv[0] and torch.cuda.device_count() >= 2:
        pytest.skip("this machine can run the symmetric-memory op")
    assert main(argv + ["--world-size", "2"]) == 2
    assert message in capsys.readouterr().err


def test_nccl_requested_without_gpus_is_exit_2(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    assert main([AG, "--backend", "nccl"]) == 2
    assert "CUDA" in capsys.readouterr().err


def test_crash_is_exit_3(capsys):
    assert main(["tests/test_dist_planted.py:CrashesOnRank", "--world-size", "2", "--timeout", "10"]) == 3
    assert "CRASH" in capsys.readouterr().out


def test_torchrun_entry_point(tmp_path):
    """`torchrun -m fusecheck.distributed`: ranks from RANK/WORLD_SIZE, results gathered to rank 0."""
    out = tmp_path / "t.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "fusecheck.distributed", AG, "--backend", "gloo", "--shape", "m=5,k=4,n=3", "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["status"] == "PASS" and data["world_size"] == 2
    assert all(sorted(r["ranks"]) == ["0", "1"] for layer in data["layers"].values() for r in layer["runs"])
