"""Planted bugs in the Triton RMSNorm of kernels/op_triton_rmsnorm.py (issue 20), each a real Triton kernel.

- `TritonTailDropped`: the sum-of-squares loop runs over full blocks only (`range(0, N - BLOCK + 1, BLOCK)`),
  so the last partial block is left out of the mean while the divisor is still N. Hidden sizes that divide
  the block are computed exactly as the correct kernel; the others (and a hidden smaller than one block,
  whose sum is then 0) are normalised wrongly. It must FAIL on the non-dividing shapes only.
- `TritonLowPrecisionAcc`: the sum of squares is accumulated in the input dtype instead of fp32 (every
  square and every add rounded to bf16/fp16, and the final reduction too). For bf16 the rounding is written
  out (fp32 bits rounded to nearest even), so it means the same on the GPU and under the interpreter, whose
  own bf16 is broken (see the kernel's docstring); in fp32 it is the correct kernel.

Importing this file without triton does not fail; `fused` then raises the kernel module's clear error.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

_NAME = "fusecheck_kernels_op_triton_rmsnorm"
_PATH = Path(__file__).resolve().parents[2] / "kernels" / "op_triton_rmsnorm.py"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, _PATH)
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_NAME])
_kernel = sys.modules[_NAME]
TritonRMSNorm, launch, triton, tl = _kernel.TritonRMSNorm, _kernel.launch, _kernel.triton, _kernel.tl

ACC_FP32, ACC_BF16, ACC_FP16 = 0, 1, 2

if triton is not None:
    @triton.jit
    def tail_dropped_kernel(X, W, Y, stride_x, stride_y, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        x_row = X + row * stride_x
        y_row = Y + row * stride_y
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N - BLOCK + 1, BLOCK):   # BUG: the last partial block never enters the sum
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)

    @triton.jit
    def _round(v, ACC: tl.constexpr):
        """v (fp32) rounded to the accumulation dtype and widened back."""
        if ACC == 1:   # bf16, round to nearest even on the fp32 bits (NaN/Inf kept)
            u = v.to(tl.uint32, bitcast=True)
            r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16   # shifts, no 64-bit mask constant
            finite = tl.abs(v) < float("inf")                  # NaN and +-Inf are kept as they are
            v = tl.where(finite, r.to(tl.float32, bitcast=True), v)
        elif ACC == 2:
            v = v.to(tl.float16).to(tl.float32)
        return v

    @triton.jit
    def low_precision_acc_kernel(X, W, Y, stride_x, stride_y, N, eps, BLOCK: tl.constexpr, ACC: tl.constexpr):
        row = tl.program_id(0)
        x_row = X + row * stride_x
        y_row = Y + row * stride_y
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            acc = _round(acc + _round(x * x, ACC), ACC)   # BUG: accumulates in the input dtype
        total = _round(tl.sum(acc, axis=0), ACC)
        rstd = 1.0 / tl.sqrt(total / N + eps)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)
else:
    tail_dropped_kernel = low_precision_acc_kernel = None


class TritonTailDropped(TritonRMSNorm):
    def fused(self, x, w):
        return launch(tail_dropped_kernel, x, w, self.eps, self.block)


class TritonLowPrecisionAcc(TritonRMSNorm):
    def fused(self, x, w):
        acc = {torch.bfloat16: ACC_BF16, torch.float16: ACC_FP16}.get(x.dtype, ACC_FP32)
        return launch(low_precision_acc_kernel, x, w, self.eps, self.block, ACC=acc)
