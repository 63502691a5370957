#!/usr/bin/env bash
# H200 x2: the 70B-shaped sharded check (issue 13), then the 1.1B before/after (issue 8) and the compare
# core (issue 12) side by side on the two GPUs.
set -u
export PYTHONUNBUFFERED=1
mkdir -p $OUT
FUSECHECK_RANK_TIMEOUT_S=280 timeout 300 python3 -m fusecheck check --nproc 2 models/meta.py:build_70b_meta --device cuda --dtype bf16 --json $OUT/sharded_70b.json --time-limit 290 > $OUT/sharded_70b.log 2>&1
echo "70b exit $?"; tail -25 $OUT/sharded_70b.log
(CUDA_VISIBLE_DEVICES=1 timeout 230 python3 benchmarks/compare.py --device cuda --sizes 1e6,1.6e7,2.7e8 --modes eager,compiled --repeat 5 --out $OUT/compare_h200.md > $OUT/compare.log 2>&1 &)
CUDA_VISIBLE_DEVICES=0 python3 benchmarks/streamed_golden.py --device cuda --out $OUT/scale.jsonl --target models/scale.py:build_1b --modes before,streamed --train --baseline-tree "${BASELINE_TREE:-.bench_before}" --time-limit 110 | grep -v Warn
wait; sleep 1; cat $OUT/compare.log | tail -30
