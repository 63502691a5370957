#!/usr/bin/env bash
# Issue 14's power grid: fp32 plants (one layer: rounding, perturbation, sign flips, a bf16-accumulated
# reduction) and bf16 plants (the same degradation in every layer, and sign flips), --train, seeds 0-2.
# Usage: bash benchmarks/power_grid.sh DEVICE JSONL JOBS   (JSONL resumes a grid cut short)
set -u
export PYTHONPATH=$PWD
device=$1; jsonl=$2; jobs=${3:-2}
vs() { python benchmarks/verdict_stability.py --device "$device" --seeds 0-2 --part power --quick --jobs "$jobs" \
  --threads 1 --jsonl "$jsonl" "$@"; }
vs --plants round_bits,perturb,flip_small,bf16_sum --power-dtypes fp32 > "${jsonl%.jsonl}_fp32.log" 2>&1
vs --plants round_bits_all,bf16_sum_all,flip_small --power-dtypes bf16 > "${jsonl%.jsonl}_bf16.log" 2>&1
python benchmarks/verdict_stability.py --table "$jsonl"
