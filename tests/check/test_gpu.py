"""CUDA: Inductor's Triton codegen judged by the same core. Skipped on machines without CUDA."""
import pytest
import torch

from fusecheck.case import load_target
from fusecheck.check import run_check

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("target", ["models/mlp.py:build", "fusecheck/builtin/transformer_block.py:build",
                                    "models/conv_bn_relu.py:build", "models/data_movement.py:build"])
def test_inductor_triton_passes_on_reference_models(target, dtype):
    r = run_check(load_target(target), backend="inductor", dtype=dtype, device="cuda", train=True)
    assert r.passed, [(row.name, row.verdict.message) for row in r.rows if not row.passed]
    assert all(row.vs_reference is not None for row in r.rows)


def test_planted_bug_fails_on_cuda():
    r = run_check(load_target("models/mlp.py:build"), backend="tests/planted/backends.py:bf16_matmul",
                  dtype="fp32", device="cuda")
    assert r.status == "FAIL"


def _extra_memory_of_compare(n: int) -> int:
    from fusecheck.compare import compare
    g = torch.randn(n, dtype=torch.float64, device="cuda")
    ref = g.to(torch.bfloat16)
    res = ref.clone()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    assert compare(res, ref, g).verdict.code == "bitwise_equal"
    return torch.cuda.max_memory_allocated() - base


def test_comparison_memory_is_bounded_by_the_chunk_not_the_tensor():
    small, big = _extra_memory_of_compare(1 << 24), _extra_memory_of_compare(1 << 27)
    # 8x more data, about the same working memory, and well under one fp64 copy of the big pair (2 GiB)
    assert big < 1.25 * small + (16 << 20), (small, big)
    assert big < (1 << 27) * 8 * 2 / 2, big
