#!/usr/bin/env bash
# The power grid on the drawn families (issues 14 and 27): the default plan (fp32: one-layer rounding,
# perturbation, sign flips, a bf16-accumulated reduction; bf16: the same degradation in every layer, sign
# flips; both: the few-element plants few_wrong and flip_few in the model's head), --quick strengths,
# --train, in JOBS shard processes appending to one JSONL file (a grid cut short resumes from it).
# FAMILIES=hf:gpt2,hf:llama,... runs issue 14's fixed models instead of the draws.
# Usage: bash benchmarks/power_grid.sh DEVICE JSONL [JOBS] [SEEDS]
set -u
export PYTHONPATH=$PWD TORCHINDUCTOR_COMPILE_THREADS=1
device=$1; jsonl=$2; jobs=${3:-2}; seeds=${4:-0}
python benchmarks/verdict_stability.py --device "$device" --seeds "$seeds" --families "${FAMILIES:-all}" \
  --part power --quick --jobs "$jobs" --threads 1 --jsonl "$jsonl" > "${jsonl%.jsonl}.log" 2>&1
python benchmarks/verdict_stability.py summary "$jsonl"
