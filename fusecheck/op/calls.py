"""One call of the reference or the fused op on a dict of inputs: outputs by name, gradients with --train.

Every call gets fresh copies of the inputs (an op that writes into its inputs cannot leak into the next
call) and, with --train, the same cotangents, so fused, eager and golden differentiate the same loss.
"""
from __future__ import annotations

from typing import Callable

import torch

from fusecheck.op.spec import KernelError, SpecError, outputs


def cast(inputs: dict, dtype: torch.dtype) -> dict:
    """Floating tensors to `dtype` (the golden's fp64 copy, the magnitude probes' fp32 reference)."""
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}


def grad_names(spec, inputs: dict) -> list[str]:
    wanted = getattr(spec, "grad_inputs", None)
    names = [k for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]
    if wanted is None:
        return names
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise SpecError(f"{type(spec).__name__}.grad_inputs names {unknown}, which are not floating inputs")
    return [k for k in names if k in wanted]


def cotangents(results: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Fixed random cotangents shaped like the reference's floating outputs (drawn in fp32, then cast)."""
    g = torch.Generator().manual_seed((int(seed) * 2_654_435_761 + 97) % 2 ** 63)
    return {k: torch.randn(v.shape, generator=g).to(v.dtype).to(v.device) for k, v in results.items()
            if v.is_floating_point()}


def call(fn: Callable, inputs: dict, *, who: str, kernel: bool, train: list[str] | None = None,
         cots: dict[str, torch.Tensor] | None = None) -> dict[str, object]:
    """`fn(**inputs)` (copies) as {"output...": tensor, "grad.<input>": tensor}. `kernel`: a raise is the
    kernel's (KernelError, exit 3), else the spec's (SpecError, exit 2). A fused result of the wrong kind is
    returned as is under "output" and judged (a type mismatch is a FAIL, never a crash)."""
    ins = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    for k in train or ():
        ins[k].requires_grad_(True)
    try:
        with torch.enable_grad() if train else torch.no_grad():
            result = fn(**ins)
            try:
                outs = outputs(result, who)
            except SpecError:
                if kernel:
                    return {"output": result}
                raise
            if train:
                pairs = [(o, cots[n].to(o.dtype)) for n, o in outs.items()
                         if isinstance(o, torch.Tensor) and o.requires_grad and n in cots and cots[n].shape == o.shape]
                if pairs:
                    torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])
    except (SpecError, KernelError):
        raise
    except Exception as exc:
        error = KernelError if kernel else SpecError
        raise error(f"{who} raised {type(exc).__name__}: {exc}") from None
    got: dict[str, object] = {n: o.detach() if isinstance(o, torch.Tensor) else o for n, o in outs.items()}
    for k in train or ():
        if ins[k].grad is not None:
            got[f"grad.{k}"] = ins[k].grad
    return got
