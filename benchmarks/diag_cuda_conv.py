"""Diagnose the CUDA conv FAILs of the stability grid: which setting makes compiled's conv worse than eager's.

    python benchmarks/diag_cuda_conv.py
For ViT/ResNet fp32 forward and ResNet bf16 --train, runs the check with stock settings, with cuDNN TF32 off,
and with Inductor's layout optimization off, and eager alone in channels-last (eager's own error in the layout
Inductor picks)."""
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.verdict_stability import build, summarize  # noqa: E402
from fusecheck.check import run_check  # noqa: E402


def check(model, dtype, train, seed):
    r = summarize(run_check(build(model, seed), backend="inductor", dtype=dtype, device="cuda", train=train, seed=seed))
    return f"{r['status']} rmse-only {'FAIL' if r['rmse_only_fails'] else 'PASS'} {r['fails'][:1]}"[:260]


def eager_layouts(model, dtype, seed):
    """Eager's forward error against fp64 in NCHW and in channels-last."""
    case = build(model, seed)
    g = copy.deepcopy(case.model).double().cuda()
    x = case.inputs[0].cuda()
    ref = g(x.double())
    out = {}
    for name, fmt in (("nchw", torch.contiguous_format), ("channels_last", torch.channels_last)):
        m = copy.deepcopy(case.model).to("cuda", getattr(torch, dtype)).to(memory_format=fmt)
        y = m(x.to(getattr(torch, dtype)).contiguous(memory_format=fmt))
        out[name] = float((y.double() - ref).pow(2).mean().sqrt())
    return out


for model, dtype, train, seeds in (("vit", "float32", False, [0, 1]), ("resnet", "float32", False, [0, 1]),
                                   ("resnet", "bfloat16", True, [3, 6, 8])):
    for seed in seeds:
        print(model, dtype, "train" if train else "fwd", seed, flush=True)
        print("   stock:", check(model, dtype, train, seed), flush=True)
        torch.backends.cudnn.allow_tf32 = False
        print("   cudnn tf32 off:", check(model, dtype, train, seed), flush=True)
        torch.backends.cudnn.allow_tf32 = True
        with torch._inductor.config.patch(layout_optimization=False):
            print("   layout_optimization off:", check(model, dtype, train, seed), flush=True)
        print("   eager rmse by layout:", eager_layouts(model, dtype, seed), flush=True)
