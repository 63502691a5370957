#!/usr/bin/env bash
# Issue 14 on the H200 host: the stability grid on CUDA (or on the host's CPU) and the power grid on CUDA.
# Each run is appended to a JSONL file under $OUT as it finishes. A call cut short by the device's time limit
# resumes: the files already in benchmarks/results/ are copied to $OUT first and their runs are skipped
# (copy the new files back after each call); FRESH=1 starts over (after a change to the verdict).
# Usage: [FRESH=1] bash benchmarks/h200_stability.sh [cuda|stability|power] [seconds]
set -u
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
part=${1:-cuda}; limit=${2:-540}
if [ -z "${FRESH:-}" ]; then
  for f in benchmarks/results/{stability_cuda_final,stability_hostcpu,power_cuda_final}.jsonl; do
    [ -e "$f" ] && cp -n "$f" "$OUT/"
  done
fi
python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
stability() {  # device jobs
  timeout "$limit" python benchmarks/verdict_stability.py --device "$1" --seeds 0-9 --part stability --jobs "$2" \
    --threads 1 --jsonl "$OUT/$3.jsonl" > "$OUT/$3.log" 2>&1
}
case "$part" in
  cuda) stability cuda 8 stability_cuda_final & timeout "$limit" bash benchmarks/power_grid.sh cuda "$OUT/power_cuda_final.jsonl" 6 & ;;
  stability) stability cuda 8 stability_cuda_final & stability cpu 6 stability_hostcpu & ;;
  power) timeout "$limit" bash benchmarks/power_grid.sh cuda "$OUT/power_cuda_final.jsonl" 14 & ;;
esac
wait
for f in "$OUT"/*.jsonl; do echo "$f: $(wc -l < "$f") runs, $(grep -c '"status": "FAIL"' "$f") FAIL"; done
