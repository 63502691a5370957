"""CUDA: Inductor's Triton codegen judged by the same core. Skipped on machines without CUDA."""
import pytest
import torch

from fusecheck.case import load_target
from fusecheck.run import run_check

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("target", ["models/mlp.py:build", "models/transformer_block.py:build",
                                    "models/conv_bn_relu.py:build", "models/data_movement.py:build"])
def test_inductor_triton_passes_on_reference_models(target, dtype):
    r = run_check(load_target(target), backend="inductor", dtype=dtype, device="cuda", train=True)
    assert r.passed, [(row.name, row.verdict.message) for row in r.rows if not row.passed]
    assert all(row.vs_reference is not None for row in r.rows)


def test_planted_bug_fails_on_cuda():
    r = run_check(load_target("models/mlp.py:build"), backend="tests/planted_backends.py:bf16_matmul",
                  dtype="fp32", device="cuda")
    assert r.status == "FAIL"


def test_comparison_runs_on_device_in_chunks():
    from fusecheck.compare import compare
    g = torch.randn(1 << 24, dtype=torch.float64, device="cuda")
    ref = g.to(torch.bfloat16)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    c = compare(ref.clone(), ref, g)
    extra = torch.cuda.max_memory_allocated() - base
    assert c.verdict.code == "bitwise_equal"
    # chunked: far below one fp64 copy of the whole pair (2 x 128 MiB)
    assert extra < 256 * 2**20, extra
