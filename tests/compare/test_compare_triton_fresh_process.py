"""The Triton comparison kernels' core tests (tests/compare/test_compare_triton.py), in a fresh process on a machine
without CUDA: Triton's interpreter is chosen before triton is first imported, and in a whole suite Inductor
has imported it by then, so that file skips itself there. This runs its fast-pass, threshold-tie, NaN/Inf,
equivalence and kept-workspace tests where CI can (triton installed by the test extra); on CUDA the file runs natively."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SELECTED = ("fast_pass or ordinary or exact_kernel_alone or ties or nan_and_inf or (every_accumulator and bfloat16) "
            "or kept_workspace")


@pytest.mark.slow
def test_the_kernels_agree_with_the_eager_core_in_triton_s_interpreter():
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        pytest.skip("CUDA: tests/compare/test_compare_triton.py runs the kernels natively")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                           str(ROOT / "tests" / "compare" / "test_compare_triton.py"), "-k", SELECTED],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    tail = done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert " passed" in tail and "skipped" not in tail.splitlines()[-1], tail  # they ran, none skipped
