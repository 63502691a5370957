"""The streamed golden: the model's own forward (and backward) run in fp64, one piece's weights at a time.

Inside `StreamedGolden(model, plan, ...)` each piece's `forward` is wrapped: on entry its weights are
upcast, on exit they are put back. Activations flow between pieces in fp64, so the result is the same
golden as a whole-model fp64 copy (same ops, same order) while only one piece exists in fp64 at once.

With `train`, each piece runs as a reentrant checkpoint: the forward keeps only the piece's fp64 input; the
backward upcasts the piece again, recomputes it with grad, backpropagates, and hands each parameter's fp64
gradient to `on_grad(name, grad)` as soon as every use of that parameter has contributed (tied weights are
summed across pieces). The fp64 gradients of the whole model therefore never exist at once.
"""
from __future__ import annotations

import contextlib
import functools
from collections import defaultdict
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from fusecheck.streamed.plan import BlockPlan
from fusecheck.streamed.upcast import upcast

GradSink = Callable[[str, torch.Tensor], None]


class _Grads:
    """Sums partial fp64 gradients per original parameter and releases each when its last use is done."""

    def __init__(self, names: dict[int, str], sink: GradSink):
        self.names, self.sink = names, sink
        self.pending: dict[int, torch.Tensor] = {}
        self.uses: dict[int, int] = defaultdict(int)

    def opened(self, ids) -> None:
        for i in ids:
            self.uses[i] += 1

    def closed(self, swapped: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> None:
        for i, (_, copy) in swapped.items():
            if copy.grad is not None:
                self.pending[i] = self.pending[i] + copy.grad if i in self.pending else copy.grad
                copy.grad = None
            self.uses[i] -= 1
            if self.uses[i] == 0:
                self._release(i)

    def _release(self, i: int) -> None:
        grad = self.pending.pop(i, None)
        if grad is not None and i in self.names:
            self.sink(self.names[i], grad)

    def flush(self) -> None:
        """Uses whose backward never ran (an output that was not part of the loss): release what arrived."""
        for i in list(self.pending):
            self._release(i)
        self.uses.clear()


class _Piece(torch.autograd.Function):
    """A piece run as a reentrant checkpoint with upcast weights (see the module docstring)."""

    @staticmethod
    def forward(ctx, runner: "_Runner", _anchor: torch.Tensor, *tensors: torch.Tensor):
        ctx.runner = runner
        ctx.save_for_backward(*tensors)
        with upcast(runner.module, runner.dtype, runner.device, leaves=False) as swapped:
            runner.grads.opened(swapped)
            outs = runner.call(tensors)
        ctx.mark_non_differentiable(*[o for o in outs if not (o.is_floating_point() or o.is_complex())])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grad_outs: torch.Tensor):
        runner: _Runner = ctx.runner
        saved = ctx.saved_tensors
        inputs = [t.detach().requires_grad_(need) for t, need in zip(saved, ctx.needs_input_grad[2:])]
        with torch.enable_grad(), upcast(runner.module, runner.dtype, runner.device, leaves=True) as swapped:
            outs = runner.call(inputs, keep=False)
            pairs = [(o, g) for o, g in zip(outs, grad_outs) if g is not None and o.requires_grad]
            del outs
            if pairs:
                torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            del pairs  # the recomputed graph references the piece's fp64 weights: release it now, not at the end
            runner.grads.closed(swapped)
        ctx.runner = None
        return (None, None, *[t.grad if need else None for t, need in zip(inputs, ctx.needs_input_grad[2:])])


_TENSOR = object()  # where an output tensor goes in a piece's output structure


class _Runner:
    """One call of one piece: its arguments split into tensors (through autograd) and everything else."""

    def __init__(self, module, original, args, kwargs, dtype, device, grads: _Grads):
        self.module, self.original, self.dtype, self.device, self.grads = module, original, dtype, device, grads
        self.flat, self.spec = pytree.tree_flatten((args, kwargs))
        self.slots = [i for i, x in enumerate(self.flat) if isinstance(x, torch.Tensor)]
        self.out_spec = None
        self.out_leaves: list[Any] = []

    def tensors(self) -> list[torch.Tensor]:
        return [self.flat[i] for i in self.slots]

    def call(self, tensors, keep: bool = True) -> list[torch.Tensor]:
        """Run the piece on `tensors`; with `keep`, remember the output's structure (not its tensors)."""
        flat = list(self.flat)
        for i, t in zip(self.slots, tensors):
            flat[i] = t
        args, kwargs = pytree.tree_unflatten(flat, self.spec)
        out = self.original(*args, **kwargs)
        leaves, spec = pytree.tree_flatten(out)
        if keep:
            self.out_spec = spec
            self.out_leaves = [_TENSOR if isinstance(x, torch.Tensor) else x for x in leaves]
        return [x for x in leaves if isinstance(x, torch.Tensor)]

    def rebuild(self, outs) -> Any:
        it = iter(outs)
        return pytree.tree_unflatten([next(it) if x is _TENSOR else x for x in self.out_leaves], self.out_spec)


class StreamedGolden(contextlib.AbstractContextManager):
    """Within the block, calling `model` with `dtype` inputs computes its streamed `dtype` golden."""

    def __init__(self, model: torch.nn.Module, plan: BlockPlan, dtype: torch.dtype,
                 device: torch.device | None = None, *, train: bool = False, on_grad: GradSink | None = None):
        self.model, self.plan, self.dtype, self.device, self.train = model, plan, dtype, device, train
        names = {id(p): n for n, p in model.named_parameters()}
        self.grads = _Grads(names, on_grad or (lambda n, g: None))
        self._patched: list[torch.nn.Module] = []
        self._resident: list[dict] = []

    def __enter__(self) -> "StreamedGolden":
        for _, module in self.plan.pieces:
            self._patch(module, functools.partial(self._piece_call, module, module.forward))
        self._patch(self.model, functools.partial(self._root_call, self.model.forward))
        return self

    def __exit__(self, *exc) -> None:
        for module in self._patched:
            del module.forward
        self._patched.clear()

    def finish(self) -> None:
        """After the backward pass: release the resident tensors' gradients and any left pending."""
        for swapped in self._resident:
            self.grads.closed(swapped)
        self._resident.clear()
        self.grads.flush()

    def _patch(self, module: torch.nn.Module, fn) -> None:
        if "forward" in module.__dict__:
            raise RuntimeError(f"{type(module).__name__} already has an instance-level forward")
        module.forward = fn
        self._patched.append(module)

    def _root_call(self, original, *args, **kwargs):
        with contextlib.ExitStack() as stack:
            whole_run = [(owner, False) for _, owner in self.plan.resident]
            whole_run += [(unit, True) for _, unit in self.plan.resident_units]
            for owner, recurse in whole_run:
                swapped = stack.enter_context(upcast(owner, self.dtype, self.device, recurse=recurse,
                                                     leaves=self.train and torch.is_grad_enabled()))
                self.grads.opened(swapped)
                self._resident.append(swapped)
            return original(*args, **kwargs)

    def _piece_call(self, module, original, *args, **kwargs):
        if not (self.train and torch.is_grad_enabled()):
            with upcast(module, self.dtype, self.device):
                return original(*args, **kwargs)
        runner = _Runner(module, original, args, kwargs, self.dtype, self.device, self.grads)
        anchor = torch.empty(0, requires_grad=True)  # so the piece is differentiated even when no input needs grad
        outs = _Piece.apply(runner, anchor, *runner.tensors())
        runner.flat = [None if isinstance(x, torch.Tensor) else x for x in runner.flat]  # saved by autograd instead
        return runner.rebuild(outs)
