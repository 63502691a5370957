"""Running a prepared case once: forward, and with `train` a backward pass with fixed cotangents.

Results are flattened to `{name: tensor}` (outputs by pytree path, gradients by parameter/input name)
so that eager, compiled and golden runs line up key by key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from fusecheck.case import Case, TargetError
from fusecheck.golden import cast_tree


@dataclass
class RunResult:
    outputs: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor] = field(default_factory=dict)
    cotangents: dict[str, torch.Tensor] | None = None  # what the backward pass used (to reuse in other runs)

    def all(self) -> dict[str, torch.Tensor]:
        return {**self.outputs, **self.grads}


def flatten_outputs(out: Any) -> dict[str, torch.Tensor]:
    leaves, _ = pytree.tree_flatten_with_path(out)
    flat = {}
    for path, leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            flat["output" + pytree.keystr(path)] = leaf
    return flat


def make_cotangents(outputs: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Fixed random upstream gradients, one per floating output that needs a gradient."""
    gen = torch.Generator().manual_seed(seed + 1)
    return {k: torch.randn(v.shape, generator=gen, dtype=torch.float32).to(v.dtype).to(v.device)
            for k, v in outputs.items() if v.is_floating_point() and v.requires_grad}


def run_once(fn: Callable[..., Any], case: Case, *, train: bool = False,
             cotangents: dict[str, torch.Tensor] | None = None, seed: int = 0) -> RunResult:
    """Call `fn(*case.inputs, **case.kwargs)`; with `train`, backpropagate `cotangents` (made from `seed`
    when None) and collect the gradients of parameters and floating inputs."""
    model = case.model
    params = dict(model.named_parameters()) if isinstance(model, torch.nn.Module) else {}
    inputs = case.inputs
    if train:
        for p in params.values():
            p.grad = None
        inputs = pytree.tree_map(lambda x: x.detach().clone().requires_grad_(True)
                                 if isinstance(x, torch.Tensor) and x.is_floating_point() else x, inputs)
    with torch.set_grad_enabled(train):
        out = fn(*inputs, **case.kwargs)
    outputs = flatten_outputs(out)
    if not outputs:
        raise TargetError(f"case {case.name!r}: the model returned no tensors ({type(out).__name__}); nothing to check")
    grads: dict[str, torch.Tensor] = {}
    if train:
        cots = cotangents if cotangents is not None else make_cotangents(outputs, seed)
        pairs = [(outputs[k], cast_tree(c, outputs[k].dtype)) for k, c in cots.items() if k in outputs]
        if not pairs:
            raise TargetError(f"case {case.name!r}: --train but no output requires grad")
        torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])
        grads = {f"grad.{n}": p.grad.detach().clone() for n, p in params.items() if p.grad is not None}
        leaves, _ = pytree.tree_flatten_with_path(inputs)
        for path, x in leaves:
            if isinstance(x, torch.Tensor) and x.grad is not None:
                grads[f"grad.input{pytree.keystr(path)}"] = x.grad.detach().clone()
    return RunResult({k: v.detach().clone() for k, v in outputs.items()}, grads, cots if train else None)
