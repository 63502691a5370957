"""Real architectures (tiny Llama and GPT-2 from configs, random weights): optional, skipped without transformers."""
import pytest

pytest.importorskip("transformers")

from fusecheck.case import load_target  # noqa: E402
from fusecheck.check import run_check  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("builder", ["build_llama", "build_gpt2"])
def test_inductor_passes_on_tiny_real_models(builder):
    r = run_check(load_target(f"models/hf.py:{builder}"), backend="inductor", dtype="bf16")
    assert r.passed, [(row.name, row.verdict.message) for row in r.rows if not row.passed]
    assert r.rows[0].shape == (2, 16, 128)


@pytest.mark.slow
def test_tiny_llama_training_passes():
    """Found a false FAIL once: 5 small-value errors against eager's 2 in one gradient (Poisson noise)."""
    r = run_check(load_target("models/hf.py:build_llama"), backend="inductor", dtype="bf16", train=True)
    assert r.passed, [(row.name, row.verdict.message) for row in r.rows if not row.passed]


def test_planted_bug_fails_on_a_real_model():
    r = run_check(load_target("models/hf.py:build_gpt2"), backend="tests/planted/backends.py:bf16_matmul", dtype="fp32")
    assert r.status == "FAIL"
