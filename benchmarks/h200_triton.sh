#!/usr/bin/env bash
# H200 (one GPU), issue 12's GPU half: the Triton comparison kernel's tests on the real GPU, the kernel alone
# over launch shapes (benchmarks/triton_core.py), then benchmarks/compare.py with the fastest shape next to
# the anchors (read once, assert_close, separate fp64 ops) and the eager and Inductor cores. ~6 min.
set -u
export PYTHONUNBUFFERED=1
python3 -c "import torch, triton; print(torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_compare_triton.py tests/test_compare_equivalence.py \
    2>&1 | tail -15
timeout 180 python3 benchmarks/triton_core.py --sizes 1.6e7,2.7e8 --sweep --best-out "$OUT/best.txt" 2>&1 \
    | tee "$OUT/triton_core.md"
CONFIG=$(cat "$OUT/best.txt" 2>/dev/null || echo 32,1,8)
FUSECHECK_TRITON_CONFIG=$CONFIG timeout 200 python3 benchmarks/compare.py --device cuda --sizes 1e6,1.6e7,2.7e8 \
    --modes eager,compiled,triton --repeat 5 --out "$OUT/compare_h200.md" 2>&1 | tail -12
echo "launch shape used: $CONFIG"
