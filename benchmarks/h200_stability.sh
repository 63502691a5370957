#!/usr/bin/env bash
# Issue 27 on the H200 host: the verdict on a distribution of drawn tiny models (models/families.py), CUDA.
#   stability: seeds 0-3 x every family that builds there (21 from transformers, 2 from timm when it imports)
#              x fp32/bf16 x forward/--train = 368 runs (336 without timm);
#   power:     seed 0, the default plan at --quick strengths (23 planted runs per draw, all --train) = 529 runs.
# Estimate: every run compiles afresh (each draw has its own shapes, so no cache hits): ~40-60 s per run in
# one process, CPU-bound (the GPU work is milliseconds); 14 processes on the host's 16 cores give ~15-20
# runs a minute: stability ~20-25 min = 3 calls of 540 s, power ~30-35 min = 4 calls.
# Each call runs JOBS shard processes (--shard i/JOBS) for at most SECONDS, all appending each finished run
# to one JSONL file under $OUT (locked appends). A call cut short resumes: the file of the same name in
# benchmarks/results/ is copied to $OUT first and its runs are skipped, so copy $OUT/<name>.jsonl back into
# benchmarks/results/ after each call and call again until the last line says "0 to run".
# FRESH=1 starts over (after a change to the verdict).
# Usage: [FRESH=1] bash benchmarks/h200_stability.sh [stability|power] [SECONDS] [JOBS]
set -u
export PYTHONPATH=$PWD TORCHINDUCTOR_COMPILE_THREADS=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
part=${1:-stability}; limit=${2:-540}; jobs=${3:-14}
case "$part" in
  stability) name=stability_cuda_draws; args=(--part stability --seeds 0-3) ;;
  power) name=power_cuda_draws; args=(--part power --quick --seeds 0) ;;
  *) echo "usage: [FRESH=1] bash $0 [stability|power] [SECONDS] [JOBS]" >&2; exit 2 ;;
esac
if [ -z "${FRESH:-}" ] && [ -e "benchmarks/results/$name.jsonl" ]; then
  cp -n "benchmarks/results/$name.jsonl" "$OUT/"
fi
python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
python -c "import timm; print('timm', timm.__version__)" || echo "timm does not import: its families are not run"
vs() { python benchmarks/verdict_stability.py --device cuda "${args[@]}" --jsonl "$OUT/$name.jsonl" "$@"; }
vs --dry-run
for i in $(seq 0 $((jobs - 1))); do
  timeout "$limit" python benchmarks/verdict_stability.py --device cuda "${args[@]}" --jsonl "$OUT/$name.jsonl" \
    --threads 1 --shard "$i/$jobs" >> "$OUT/$name.log" 2>&1 &
done
wait
python benchmarks/verdict_stability.py summary "$OUT/$name.jsonl" > "$OUT/${name}_summary.md" 2>&1
echo "$name: $(wc -l < "$OUT/$name.jsonl") rows, $(grep -c '"status": "FAIL"' "$OUT/$name.jsonl") FAIL," \
  "$(grep -c '"status": "SKIP"' "$OUT/$name.jsonl") SKIP, $(grep -c '"status": "ERROR"' "$OUT/$name.jsonl") ERROR"
vs --dry-run
