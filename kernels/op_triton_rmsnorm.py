"""A fused RMSNorm with a weight, as a real Triton kernel, checked by `fusecheck op` (issue 20).

    y = x * rsqrt(mean(x**2, -1) + eps) * w          x (..., hidden), w (hidden,)

One program per row. The row is walked in blocks of BLOCK columns (a loop when hidden > BLOCK), twice: the
first pass accumulates the sum of squares in fp32 (one fp32 lane per column of the block, reduced at the
end), the second scales each block by rstd and the weight and stores it in the input dtype (one rounding).
The last block of a row is partial when hidden % BLOCK != 0, so the masks matter: the spec's shapes include
hidden sizes that do not divide the block, and one smaller than a single block.

Runs on CUDA tensors, and on CPU tensors under the Triton interpreter (TRITON_INTERPRET=1 in the environment
before triton is imported):

    fusecheck op kernels/op_triton_rmsnorm.py:TritonRMSNorm --dtype fp32,bf16,fp16 --device cuda
    TRITON_INTERPRET=1 fusecheck op kernels/op_triton_rmsnorm.py:TritonRMSNorm --dtype fp32,bf16,fp16 --repeat 1

Importing this module never needs triton; `fused` raises a clear error when it is missing.
Interpreter note (Triton 3.6, measured here): the interpreter's bf16 is wrong where the GPU's is not: fp32 ->
bf16 casts round toward zero (the GPU rounds to nearest), bf16 subnormals load and store wrong (5.9e-39 loads
as 0.0, 1e-39 as 4.4e-39), and native bf16 arithmetic returns garbage. So under the interpreter only, a bf16
call hands the kernel the same values widened to fp32 (exact) and rounds the fp32 result to bf16 in torch
(round to nearest): the kernel's arithmetic is unchanged, only the two conversions the interpreter gets wrong
move out of it. On CUDA the kernel loads and stores bf16 itself.
"""
from __future__ import annotations

import os

import torch

from fusecheck.op import OpSpec, seeded_randn

try:  # import-guarded: the module (and its spec) load without triton
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    triton = None
    tl = None

TRITON_MISSING = ("triton is not importable: the Triton RMSNorm kernel needs it (pip install triton; on CPU "
                  "run with TRITON_INTERPRET=1)")


def interpreted() -> bool:
    """Whether triton kernels run under the interpreter (decided by the environment at triton's import)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


if triton is not None:
    @triton.jit
    def rmsnorm_kernel(X, W, Y, stride_x, stride_y, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        x_row = X + row * stride_x
        y_row = Y + row * stride_y
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)
else:
    rmsnorm_kernel = None


def require_triton(x: torch.Tensor) -> None:
    """A clear error instead of a deep one: no triton, or a CPU tensor without the interpreter."""
    if triton is None:
        raise RuntimeError(TRITON_MISSING)
    if x.device.type == "cpu" and not interpreted():
        raise RuntimeError("a CPU tensor reached the Triton kernel without the interpreter: set "
                           "TRITON_INTERPRET=1 in the environment before triton is imported, or use --device cuda")


def launch(kernel, x: torch.Tensor, w: torch.Tensor, eps: float, block: int, **meta) -> torch.Tensor:
    """Flatten x to (rows, hidden), launch one program per row, return y in x's dtype and shape."""
    require_triton(x)
    hidden = x.shape[-1]
    if w.shape != (hidden,):
        raise ValueError(f"weight shape {tuple(w.shape)} does not match hidden size {hidden}")
    x2 = x.reshape(-1, hidden).contiguous()
    w = w.contiguous()
    widen = interpreted() and torch.bfloat16 in (x.dtype, w.dtype)   # see the module docstring
    if widen:
        x2, w = x2.float(), w.float()
    y = torch.empty_like(x2)
    if x2.shape[0] and hidden:
        kernel[(x2.shape[0],)](x2, w, y, x2.stride(0), y.stride(0), hidden, eps, BLOCK=block, **meta)
    return y.to(x.dtype).reshape(x.shape)


def triton_rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6, block: int = 32) -> torch.Tensor:
    """The fused op: fp32 inside, output in the input dtype."""
    return launch(rmsnorm_kernel, x, w, eps, block)


def rmsnorm_reference(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The unfused chain of torch ops it replaces (run eager in the op dtype, and in fp64 as the golden)."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * w


class TritonRMSNorm(OpSpec):
    # block 32 by default: hidden 64 and 128 divide it (one and several full blocks); 40, 100 leave a partial
    # last block; 17 is a single partial block. A few rows each: the interpreter runs one program at a time.
    shapes = [{"rows": 4, "hidden": 64}, {"rows": 3, "hidden": 128}, {"rows": 4, "hidden": 40},
              {"rows": 3, "hidden": 100}, {"rows": 2, "hidden": 17}]

    def __init__(self, block: int = 32, eps: float = 1e-6):
        if block < 1 or block & (block - 1):
            raise ValueError(f"block must be a power of two (a Triton block), not {block}")
        self.block = block
        self.eps = eps

    def describe(self) -> str:
        return f"{type(self).__name__}(block={self.block}, eps={self.eps:g})"

    def make_inputs(self, shape, dtype, seed):
        rows, hidden = shape["rows"], shape["hidden"]
        w = 1.0 + seeded_randn((hidden,), 2 * seed + 1, torch.float32, 0.1)
        return {"x": seeded_randn((rows, hidden), 2 * seed, dtype), "w": w.to(dtype)}

    def reference(self, x, w):
        return rmsnorm_reference(x, w, self.eps)

    def fused(self, x, w):
        return triton_rmsnorm(x, w, self.eps, self.block)
