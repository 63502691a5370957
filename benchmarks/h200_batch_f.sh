#!/usr/bin/env bash
# The last device call of the session: the Triton comparison kernel (issue 12: sweep, then compare.py with the
# fastest shape), then side by side: ResNet and Mixtral bf16 --train on CUDA over seeds 0-9 with the final
# decision rules (issue 14), fusecheck bisect on ResNet seed 6, and the GPU tests of what changed.
set -u
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 150 python benchmarks/triton_core.py --sizes 2.7e8 --sweep --best-out "$OUT/best.txt" > "$OUT/triton_core.md" 2>&1
grep -E "fastest|WRONG|elements" "$OUT/triton_core.md" | head -5
FUSECHECK_TRITON_CONFIG=$(cat "$OUT/best.txt" 2>/dev/null) timeout 150 python benchmarks/compare.py --device cuda \
  --sizes 1e6,1.6e7,2.7e8 --modes eager,triton --out "$OUT/compare.md" > "$OUT/compare.log" 2>&1
tail -n 9 "$OUT/compare.md" 2>/dev/null || tail -n 20 "$OUT/compare.log"
timeout 240 python benchmarks/verdict_stability.py --device cuda --seeds 0-9 --models resnet,mixtral --dtypes bf16 \
  --modes train --part stability --jobs 4 --threads 1 --jsonl "$OUT/stability_cuda_final.jsonl" > "$OUT/stability_final.log" 2>&1 &
timeout 240 python -m fusecheck bisect models/hf.py:build_resnet --dtype bf16 --train --device cuda --seed 6 \
  --time-limit 220 --json "$OUT/bisect_resnet_bf16_train_s6.json" > "$OUT/bisect_resnet_s6.log" 2>&1 &
CI=1 timeout 240 python -m pytest -q -p no:logging -p no:cacheprovider tests/test_compare_triton.py tests/test_gpu.py \
  tests/test_decisions.py tests/test_precision_notes.py "tests/test_bisect_enabling.py" -k "cuda or not enabling" \
  > "$OUT/gpu_tests.log" 2>&1 &
wait
echo "== stability final: $(wc -l < "$OUT/stability_cuda_final.jsonl") runs, $(grep -c '"status": "FAIL"' "$OUT/stability_cuda_final.jsonl") FAIL"
grep -E "^\[bisect\] (baseline|confirm|culprit|done)|^bisect:" "$OUT/bisect_resnet_s6.log" | cut -c1-250
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/gpu_tests.log" | tail -n 8
