#!/usr/bin/env bash
# The C comparison core (issue 12, CPU half) on the H200 host's CPU (torch 2.11): its tests, then
# benchmarks/compare.py at 2 threads (the acceptance's core count, on a quiet machine) and at 16.
set -u
export PYTHONUNBUFFERED=1
timeout 180 python3 -m pytest -q -p no:cacheprovider tests/test_cpu_core.py tests/test_compare_equivalence.py \
    tests/test_compare.py 2>&1 | tail -5
timeout 200 python3 benchmarks/compare.py --sizes 1e6,1.6e7 --repeat 5 --modes cpu_core,eager --threads 2 \
    --out $OUT/compare_cpu_t2.md > $OUT/compare_cpu_t2.log 2>&1; tail -6 $OUT/compare_cpu_t2.log
timeout 120 python3 benchmarks/compare.py --sizes 1e6,1.6e7 --repeat 5 --modes cpu_core,eager --threads 16 \
    --out $OUT/compare_cpu_t16.md > $OUT/compare_cpu_t16.log 2>&1; tail -6 $OUT/compare_cpu_t16.log
