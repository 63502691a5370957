#!/usr/bin/env bash
# The streamed golden at real sizes on one H200 (issue 8): 8B forward, 8B --train (regional), 1.1B --train
# against the code before the change (a copy of it in .bench_before/): cold, then both warm (same compile
# cache), so the times compare like with like. Results: $OUT/scale.jsonl.
set -u
export PYTHONUNBUFFERED=1
B="python3 benchmarks/streamed_golden.py --device cuda --out $OUT/scale.jsonl"
[ "${SKIP_8B_FWD:-0}" = 1 ] || $B --target models/scale.py:build_8b --modes streamed --time-limit 210
$B --target models/scale.py:build_8b --modes streamed --train --regional --time-limit 200
$B --target models/scale.py:build_1b --modes streamed --train --time-limit 150
$B --target models/scale.py:build_1b --modes before,streamed --train --baseline-tree "${BASELINE_TREE:-.bench_before}" --time-limit 90
