"""`fusecheck op` on a real Triton kernel (issue 20): the fused RMSNorm of kernels/op_triton_rmsnorm.py passes in
fp32/bf16/fp16 in one call, its planted bugs (tests/planted/op_triton_bugs.py) fail on the shapes they break.

On CUDA when there is a GPU; else on CPU tensors under the Triton interpreter. Every check runs `python -m
fusecheck op` in a subprocess, so TRITON_INTERPRET=1 is in the environment before triton is imported (this
process may already have imported triton without it). Skipped only when triton is not importable.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
KERNEL = "kernels/op_triton_rmsnorm.py:TritonRMSNorm"
BUGS = "tests/planted/op_triton_bugs.py:"
HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not importable: the Triton kernel cannot run")
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"


def fusecheck_op(tmp_path, *argv: str, timeout: int = 300) -> tuple[int, dict, str]:
    """`python -m fusecheck op ARGS --device DEVICE --json ...` in a subprocess: (exit code, JSON, output)."""
    env = dict(os.environ)
    if CUDA:
        env.pop("TRITON_INTERPRET", None)
    else:
        env["TRITON_INTERPRET"] = "1"
    out = tmp_path / "op.json"
    proc = subprocess.run([sys.executable, "-m", "fusecheck", "op", *argv, "--device", DEVICE, "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    data = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, data, proc.stdout + proc.stderr


def key(dtype: str, shape: dict) -> str:
    return f"{dtype}[{','.join(f'{k}={v}' for k, v in shape.items())}]"


def failing(data: dict) -> set[str]:
    return {r["name"].split(".")[0] for r in data["rows"] if r["verdict"]["status"] != "PASS"}


def spec_shapes() -> list[dict]:
    sys.path.insert(0, str(ROOT / "kernels"))
    try:
        import op_triton_rmsnorm
    finally:
        sys.path.remove(str(ROOT / "kernels"))
    return op_triton_rmsnorm.TritonRMSNorm.shapes


@needs_triton
def test_the_triton_rmsnorm_passes_in_fp32_bf16_fp16_in_one_call(tmp_path):
    code, data, text = fusecheck_op(tmp_path, KERNEL, "--dtype", "fp32,bf16,fp16", "--repeat", "1")
    assert code == 0, text[-3000:]
    assert data["status"] == "PASS" and data["dtypes"] == ["fp32", "bf16", "fp16"]
    judged = {r["name"].split(".")[0] for r in data["rows"]}
    assert judged == {key(d, s) for d in data["dtypes"] for s in spec_shapes()}
    assert any(":" in r["name"] for r in data["rows"]), "the NaN/Inf and magnitude probes ran"
    assert all(r["verdict"]["status"] == "PASS" for r in data["rows"])


@needs_triton
def test_the_dropped_tail_block_fails_on_the_non_dividing_hidden_sizes_only(tmp_path):
    code, data, text = fusecheck_op(tmp_path, BUGS + "TritonTailDropped", "--dtype", "fp32,bf16", "--repeat", "1")
    assert code == 1, text[-3000:]
    tails = {key(d, s) for d in ("fp32", "bf16") for s in spec_shapes() if s["hidden"] % 32}
    assert len(tails) == 6 and failing(data) == tails
    for name in tails:   # the report names them
        assert f"{name}.output" in text


@needs_triton
def test_bf16_accumulation_is_caught_where_a_lane_adds_many_squares(tmp_path):
    # block 32 over hidden 4096: 128 bf16 adds per lane. (With the spec's small shapes, or block 1024, the
    # extra error stays inside the eager bf16 chain's own rounding noise and the verdict passes it: docs/op.md.)
    code, data, text = fusecheck_op(tmp_path, BUGS + "TritonLowPrecisionAcc", "--dtype", "fp32,bf16",
                                    "--shape", "rows=2,hidden=4096", "--repeat", "1", "--no-probes")
    assert code == 1, text[-3000:]
    assert failing(data) == {"bf16[rows=2,hidden=4096]"}   # in fp32 it is the correct kernel


def test_the_kernel_module_imports_without_triton_and_fused_says_why():
    probe = ("import sys; sys.modules['triton'] = None; sys.modules['triton.language'] = None\n"
             "sys.path.insert(0, 'kernels'); import op_triton_rmsnorm as m\n"
             "spec = m.TritonRMSNorm(); inputs = spec.make_inputs(spec.shapes[0], __import__('torch').float32, 0)\n"
             "try:\n    spec.fused(**inputs)\nexcept RuntimeError as exc:\n    print('ERR', exc)\n"
             "import importlib.util as u; s = u.spec_from_file_location('bugs', 'tests/planted/op_triton_bugs.py')\n"
             "b = u.module_from_spec(s); s.loader.exec_module(b); print('BUGS', b.tail_dropped_kernel)\n")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ERR triton is not importable" in proc.stdout and "BUGS None" in proc.stdout
