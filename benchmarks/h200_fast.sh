#!/usr/bin/env bash
# H200 (one GPU): the Triton comparison core with its fast pass. GPU tests of the compare kernels, the kernel
# per launch grouping and shape with and without the fast pass, then benchmarks/compare.py next to its anchors.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_compare_triton.py tests/test_compare_equivalence.py \
    2>&1 | tail -3
FUSECHECK_TRITON_FAST=1 timeout 120 python3 benchmarks/triton_split.py --per-sm ${PER_SM:-8,12,16} \
    --groupings ${GROUPINGS:-3} 2>&1 | tee "$OUT/split_fast.md" | tail -12
FUSECHECK_TRITON_FAST=0 timeout 60 python3 benchmarks/triton_split.py --per-sm 8 --groupings 1 2>&1 | tee "$OUT/split_exact.md" | tail -3
timeout 150 python3 benchmarks/compare.py --device cuda --sizes 1e6,1.6e7,2.7e8 --modes triton --repeat 5 \
    --out "$OUT/compare_h200.md" 2>&1 | tail -6
