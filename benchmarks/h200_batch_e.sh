#!/usr/bin/env bash
# One device call: the Triton comparison kernel (issue 12), then side by side the CUDA stability re-run of
# the conv models with TF32 pinned off (issue 14), fusecheck bisect on the ResNet bf16 --train rows that fail
# on CUDA, and the GPU tests of what changed.
set -u
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 200 python benchmarks/triton_core.py --sizes 1.6e7,2.7e8 --sweep --best-out "$OUT/best.txt" > "$OUT/triton_core.md" 2>&1
tail -n 20 "$OUT/triton_core.md"
best=$(cat "$OUT/best.txt" 2>/dev/null)
FUSECHECK_TRITON_CONFIG=$best timeout 200 python benchmarks/compare.py --device cuda --sizes 1e6,1.6e7,2.7e8 \
  --modes eager,triton --out "$OUT/compare.md" > "$OUT/compare.log" 2>&1
tail -n 12 "$OUT/compare.md" 2>/dev/null || tail -n 20 "$OUT/compare.log"
timeout 260 python benchmarks/verdict_stability.py --device cuda --seeds 0-9 --models vit,resnet --dtypes fp32 \
  --modes fwd,train --part stability --jobs 4 --threads 1 --jsonl "$OUT/stability_cuda_pinned.jsonl" > "$OUT/stability_pinned.log" 2>&1 &
timeout 260 python -m fusecheck bisect models/hf.py:build_resnet --dtype bf16 --train --device cuda --seed 3 \
  --time-limit 240 --json "$OUT/bisect_resnet_bf16_train_s3.json" > "$OUT/bisect_resnet.log" 2>&1 &
timeout 260 python -m pytest -q -p no:logging tests/test_compare_triton.py tests/test_decisions.py tests/test_gpu.py \
  tests/test_precision_notes.py > "$OUT/gpu_tests.log" 2>&1 &
wait
echo "== stability pinned: $(wc -l < "$OUT/stability_cuda_pinned.jsonl") runs, $(grep -c '"status": "FAIL"' "$OUT/stability_cuda_pinned.jsonl") FAIL"
tail -n 30 "$OUT/bisect_resnet.log"
tail -n 5 "$OUT/gpu_tests.log"
