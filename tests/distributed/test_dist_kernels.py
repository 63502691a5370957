"""The reference fused kernels pass every layer at several world sizes, dtypes and seeds, with shapes that do
not divide the chunk size; torch's symmetric-memory ops run through the same specs (Python fallbacks on gloo)."""
from __future__ import annotations

import pytest

from fusecheck.distributed import load_spec
from fusecheck.distributed.pool import RankPool
from fusecheck.distributed.report import render
from fusecheck.distributed.runner import check
from fusecheck.distributed.task import CheckTask

KERNELS = ["kernels/ag_gemm.py:AllGatherGemm", "kernels/gemm_rs.py:GemmReduceScatter",
           "kernels/a2a_reorder.py:ReverseAllToAllReorder", "kernels/ar_rmsnorm.py:AllReduceRMSNorm"]
ROWS = {"m": "m", "t": "t", "s": "s"}   # the chunked dimension of each kernel's shapes


@pytest.mark.parametrize("ref", KERNELS)
def test_default_shapes_include_chunk_tails(ref):
    spec = load_spec(ref)
    chunks = spec.tiling["chunks"]
    rows = [next(v for k, v in shape.items() if k in ROWS) for shape in spec.shapes]
    assert any(r % chunks for r in rows), f"{ref}: no shape leaves a tail chunk"


@pytest.mark.parametrize("ref", KERNELS)
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("dtype, seed", [("float32", 0), ("bfloat16", 11)])
def test_correct_kernels_pass_every_layer(ref, world, dtype, seed):
    task = CheckTask(ref, dtype=dtype, seed=seed, repeat=2)
    rep = check(task, world)
    assert rep.status == "PASS", render(rep)
    assert rep.diagnosis.findings == [] and rep.diagnosis.cause.startswith("none"), render(rep)
    shapes = len(rep.spec.shapes)
    assert rep.layers["comm"].runs == rep.layers["whole"].runs == 2 * shapes
    assert rep.layers["compute"].runs >= 2 * shapes          # finite inputs + NaN/Inf in each tensor
    assert len(rep.results) == world * sum(s.runs for s in rep.layers.values())
    # NaN/Inf variants leave finite outputs to judge: never passed on NaN/Inf positions alone
    assert not [r for r in rep.results if r["comparison"]["verdict"]["code"] == "nonfinite_positions_match"]
    if rep.spec.outputs_agree:
        assert rep.cross["status"] == "PASS"


@pytest.mark.parametrize("kernel, world", [(KERNELS[0], 4), ("kernels/ar_rmsnorm.py:AllReduceRMSNorm", 2)])
def test_layer1_runs_in_the_op_dtype_even_when_positions_do_not_fit_it(kernel, world):
    rep = check(CheckTask(kernel, dtype="bfloat16", layers=("comm",), shapes=[
        {"m": 8, "k": 40, "n": 4} if "ag_gemm" in kernel else {"t": 9, "h": 40}]), world)
    assert rep.status == "PASS", render(rep)
    assert {r["tag_dtype"] for r in rep.results} == {"bfloat16"}   # 4 x 320 tags > 256, bf16's integer range
    assert {r["tags"]["scheme"] for r in rep.results} == {"sum" if "rmsnorm" in kernel else "move"}


@pytest.mark.parametrize("cls", ["SymmMemAllGatherMatmul", "SymmMemMatmulReduceScatter"])
def test_torch_symm_mem_specs_via_python_fallback(cls):
    ref = f"kernels/symm_mem_ops.py:{cls}"
    spec = load_spec(ref, impl="fallback")
    for module in spec.preload_modules:      # before the fork, so the ranks inherit it
        __import__(module)
    with RankPool(2, timeout_s=30) as pool:
        rep = check(CheckTask(ref, spec_kwargs={"impl": "fallback"}, repeat=2), 2, pool=pool)
    assert rep.status == "PASS", render(rep)


@pytest.mark.parametrize("ref", KERNELS)
def test_correct_kernels_pass_the_magnitude_probes_in_fp16(ref):
    """fp16 has the narrowest range: huge rows (2*sqrt(max) = 512) and tiny/subnormal rows stay correct in a
    kernel that computes in fp32, and the probes' reference (the op in fp32, rounded once) agrees."""
    rep = check(CheckTask(ref, dtype="float16", layers=("compute",)), 2)
    assert rep.status == "PASS", render(rep)
    variants = {r["variant"] for r in rep.results}
    assert {v.split(":")[1] for v in variants if v.startswith("magnitude:")} == {"huge", "tiny", "subnormal"}
