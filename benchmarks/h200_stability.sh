#!/usr/bin/env bash
# Issue 14 on the H200 host: the stability grid on CUDA and on the host's CPU side by side, then the power
# grid on CUDA. Each run is appended to a JSONL file under $OUT as it finishes; a call cut short by the
# device's time limit resumes from those files (copy them back to benchmarks/results/ and re-run).
# Usage: bash benchmarks/h200_stability.sh [cuda|stability|power] [seconds]
set -u
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
part=${1:-stability}; limit=${2:-540}
for f in benchmarks/results/{stability_cuda,stability_hostcpu,power_cuda}.jsonl; do [ -e "$f" ] && cp -n "$f" "$OUT/"; done
python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
if [ "$part" = cuda ]; then  # the CUDA stability grid and the power grid side by side
  timeout "$limit" python benchmarks/verdict_stability.py --device cuda --seeds 0-9 --part stability --jobs 8 \
    --threads 1 --jsonl "$OUT/stability_cuda.jsonl" > "$OUT/stability_cuda.log" 2>&1 &
  timeout "$limit" python benchmarks/verdict_stability.py --device cuda --seeds 0-2 --part power --quick --jobs 6 \
    --threads 1 --jsonl "$OUT/power_cuda.jsonl" > "$OUT/power_cuda.log" 2>&1 &
elif [ "$part" = stability ]; then
  timeout "$limit" python benchmarks/verdict_stability.py --device cuda --seeds 0-9 --part stability --jobs 6 \
    --threads 1 --jsonl "$OUT/stability_cuda.jsonl" > "$OUT/stability_cuda.log" 2>&1 &
  timeout "$limit" python benchmarks/verdict_stability.py --device cpu --seeds 0-9 --part stability --jobs 5 \
    --threads 2 --jsonl "$OUT/stability_hostcpu.jsonl" > "$OUT/stability_hostcpu.log" 2>&1 &
else
  timeout "$limit" python benchmarks/verdict_stability.py --device cuda --seeds 0-2 --part power --quick --jobs 8 \
    --threads 1 --jsonl "$OUT/power_cuda.jsonl" > "$OUT/power_cuda.log" 2>&1 &
fi
wait
for f in "$OUT"/*.jsonl; do echo "$f: $(wc -l < "$f") runs, $(grep -c '"status": "FAIL"' "$f") FAIL"; done
tail -n 25 "$OUT"/*.log | grep -v "^ " | tail -n 60
