#!/usr/bin/env bash
# GPU tests and the GPU subset of the verdict stability grid (issue 14) on one H200.
set -u
export PYTHONUNBUFFERED=1 CI=1
timeout 130 python3 -m pytest -q -p no:cacheprovider tests/test_streamed.py tests/test_bisect_enabling.py -k "cuda or gpu or enabling" 2>&1 | tail -8
timeout 330 python3 benchmarks/verdict_stability.py --device cuda --seeds 0-2 --models gpt2,llama,bert,vit --dtypes bf16 --modes train --part stability --quick --json $OUT/vs_cuda.json 2>&1 | tail -30
