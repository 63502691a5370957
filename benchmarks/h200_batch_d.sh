#!/usr/bin/env bash
# H200 x2, last batch: the compare core (issue 12) on GPU 1, the 1.1B before/after (issue 8) on GPU 0, then
# `fusecheck dist` over every reference kernel with NCCL on both GPUs (issue 10).
set -u
export PYTHONUNBUFFERED=1
(CUDA_VISIBLE_DEVICES=1 timeout 200 python3 benchmarks/compare.py --device cuda --sizes 1e6,1.6e7,2.7e8 --modes eager,compiled --repeat 5 --out $OUT/compare_h200.md > $OUT/compare.log 2>&1 &)
CUDA_VISIBLE_DEVICES=0 python3 benchmarks/streamed_golden.py --device cuda --out $OUT/scale.jsonl --target models/scale.py:build_1b --modes before,streamed --train --baseline-tree "${BASELINE_TREE:-.bench_before}" --time-limit 110 | grep -v Warn
wait; sleep 1; tail -25 $OUT/compare.log
timeout 150 python3 -m fusecheck.distributed kernels/ --world-size 2 --backend nccl --dtype bf16 --json $OUT/dist_bf16.json 2>&1 | tail -25
