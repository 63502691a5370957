"""The lossy arithmetic the planted bugs emit: round to a grid of 1/64 (an error no backend removes,
unlike an fp32->bf16->fp32 round trip, which Inductor drops inside one kernel)."""
import torch

STEP = 64.0


def quantize_ops(v):
    """Quantize an Inductor ops value (inside lowering or codegen)."""
    from torch._inductor.virtualized import ops
    return ops.truediv(ops.round(ops.mul(v, ops.constant(STEP, torch.float32))), ops.constant(STEP, torch.float32))
