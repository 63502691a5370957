"""The streamed golden: the model's own forward (and backward) run in fp64, one piece's weights at a time.

Inside `StreamedGolden(model, plan, ...)` each piece's `forward` is wrapped: on entry its weights are
upcast, on exit they are put back. Activations flow between pieces in fp64, so the result is the same
golden as a whole-model fp64 copy (same ops, same order) while only one piece exists in fp64 at once.

With `train`, each piece runs as a reentrant checkpoint: the forward keeps only the piece's fp64 input; the
backward upcasts the piece again, recomputes it with grad, backpropagates, and hands each parameter's fp64
gradient to `on_grad(name, grad)` as soon as every use of that parameter has contributed (tied weights are
summed across pieces). The fp64 gradients of the whole model therefore never exist at once.

Outside its piece a weight stays the model's own run-dtype tensor. The guard (`guard.py`) makes those
originals read and compute as their fp64 copies wherever the model reaches them (`self.dtype`,
`x.to(w.dtype)`, a tied head at the root, a parameter passed to a block, a hook), so the golden is the
whole-model golden; what it cannot make equal raises `StreamedLeak` before any result reaches the sink
(`golden_runs.run_streamed` then steps aside). An original used outside its piece with grad gets an fp64
leaf whose gradient joins the parameter's others here, as a tied weight's does.
"""
from __future__ import annotations

import contextlib
import functools
from collections import defaultdict
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from fusecheck.runs.execute import read_tensors
from fusecheck.golden.streamed.guard import Guard, StreamedLeak
from fusecheck.golden.streamed.internal import internal
from fusecheck.golden.streamed.plan import BlockPlan
from fusecheck.golden.streamed.upcast import upcast, upcast_tensor

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

    def add(self, i: int, grad: torch.Tensor | None) -> None:
        if grad is not None:
            self.pending[i] = self.pending[i] + grad if i in self.pending else grad

    def close(self, i: int, n: int = 1) -> None:
        self.uses[i] -= n
        if self.uses[i] == 0:
            self._release(i)

    def closed(self, swapped: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> None:
        for i, (_, copy) in swapped.items():
            self.add(i, copy.grad)
            copy.grad = None
            self.close(i)

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
        # with grad, as the whole copy's forward runs (code may branch on it: nn.MultiheadAttention's fast
        # path); the graph is dropped with the detached outputs, the recompute makes the one backward uses
        with torch.enable_grad(), upcast(runner.module, runner.dtype, runner.device, leaves=True) as swapped, \
                runner.phase("forward"):
            runner.grads.opened(swapped)
            outs = runner.call([_like_leaf(t) for t in tensors])
            if runner.golden.guard is not None:
                runner.golden._check_graph(outs)
            outs = [o.detach() for o in outs]
        ctx.mark_non_differentiable(*[o for o in outs if not (o.is_floating_point() or o.is_complex())])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grad_outs: torch.Tensor):
        runner: _Runner = ctx.runner
        saved = ctx.saved_tensors
        inputs = [t.detach().requires_grad_(need) for t, need in zip(saved, ctx.needs_input_grad[2:])]
        with torch.enable_grad(), upcast(runner.module, runner.dtype, runner.device, leaves=True) as swapped:
            with runner.phase("recompute"):
                outs = runner.call(inputs, keep=False)
                pairs = [(o, g) for o, g in zip(outs, grad_outs) if g is not None and o.requires_grad]
                del outs
                if pairs:
                    torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
                del pairs  # the recomputed graph references the piece's fp64 weights: release it now
            runner.grads.closed(swapped)
            runner.close_uses()
        ctx.runner = None
        return (None, None, *[t.grad if need else None for t, need in zip(inputs, ctx.needs_input_grad[2:])])


def _like_leaf(t: torch.Tensor) -> torch.Tensor:
    """A detached alias of a piece's input that requires grad as the input does."""
    return t.detach().requires_grad_(t.requires_grad) if (t.is_floating_point() or t.is_complex()) else t


_TENSOR = object()  # where an output tensor goes in a piece's output structure


class _Runner:
    """One call of one piece: its arguments split into tensors (through autograd) and everything else."""

    def __init__(self, golden: "StreamedGolden", module, original, args, kwargs):
        self.golden, self.module, self.original = golden, module, original
        self.dtype, self.device, self.grads = golden.dtype, golden.device, golden.grads
        self.flat, self.spec = pytree.tree_flatten((args, kwargs))
        self.slots = [i for i, x in enumerate(self.flat) if isinstance(x, torch.Tensor)]
        self.out_spec = None
        self.out_leaves: list[Any] = []
        # uses of parameters of other pieces (reached from this one) counted in the forward: the recompute
        # adds their gradients, and they are closed after this piece's backward
        self.uses: dict[int, int] = defaultdict(int)

    @contextlib.contextmanager
    def phase(self, name: str):
        self.golden.stack.append((self, name))
        try:
            yield
        finally:
            self.golden.stack.pop()

    def close_uses(self) -> None:
        for i, n in self.uses.items():
            self.grads.close(i, n)
        self.uses.clear()

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
                 device: torch.device | None = None, *, train: bool = False, on_grad: GradSink | None = None,
                 guard: bool = True):
        self.model, self.plan, self.dtype, self.device, self.train = model, plan, dtype, device, train
        names = {id(p): n for n, p in model.named_parameters()}
        self.grads = _Grads(names, on_grad or (lambda n, g: None))
        self._patched: list[torch.nn.Module] = []
        self._resident: list[dict] = []
        self.stack: list[tuple[_Runner, str]] = []  # the piece (and phase) running now; empty at the root
        self.guard = Guard(read_tensors(model), dtype, device, self._substitute) if guard else None

    def __enter__(self) -> "StreamedGolden":
        try:
            for _, module in self.plan.pieces:
                self._patch(module, functools.partial(self._piece_call, module, module.forward))
            self._patch(self.model, functools.partial(self._root_call, self.model.forward))
            if self.guard is not None:
                self.guard.__enter__()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.guard is not None:
            self.guard.__exit__(None, None, None)
        for module in self._patched:
            del module.forward
        self._patched.clear()

    def finish(self) -> None:
        """After the backward pass: release the resident tensors' gradients and any left pending."""
        if self.guard is not None:
            self.guard.check()
            with internal():
                stray = [self.guard.name(t) for t in self.guard.originals.values() if t.grad is not None]
            if stray:  # a path the forward's checks did not see (a custom Function inside a piece)
                raise StreamedLeak(f"a gradient reached the run-dtype parameter {stray[0]} itself, not its fp64 "
                                   "copy", tuple(stray))
        for swapped in self._resident:
            self.grads.closed(swapped)
        self._resident.clear()
        self.grads.flush()

    def _substitute(self, t: torch.Tensor) -> torch.Tensor:
        """The guard's copy of an original used outside its piece; with grad, a leaf whose gradient joins
        the parameter's other uses (`_Grads`)."""
        copy = upcast_tensor(t, self.dtype, self.device)
        i = id(t)
        with internal():
            needs = self.train and t.requires_grad and i in self.grads.names
        if not needs:
            return copy
        top = self.stack[-1] if self.stack else None
        if top is not None and top[1] == "forward":  # the piece's recompute takes the gradient
            top[0].uses[i] += 1
            self.grads.opened([i])
            return copy.requires_grad_(True)  # as the whole copy's parameter: no gradient ever reaches it
        if not torch.is_grad_enabled():
            return copy
        grads = self.grads
        leaf = copy.requires_grad_(True)
        if top is None:  # at the root: one use, closed when its gradient has arrived
            grads.opened([i])

            def hook(x: torch.Tensor) -> None:
                grads.add(i, x.grad)
                x.grad = None
                grads.close(i)
        else:  # a piece's recompute: the use was opened in its forward and is closed after its backward

            def hook(x: torch.Tensor) -> None:
                grads.add(i, x.grad)
                x.grad = None
        leaf.register_post_accumulate_grad_hook(hook)
        return leaf

    def _check_graph(self, out: Any) -> None:
        """Before any gradient exists (the root's forward graph, each piece's forward graph): a run-dtype
        parameter that is a leaf of the autograd graph (passed to a custom autograd Function) would get its
        gradient itself, not through its fp64 copy."""
        todo = [t.grad_fn for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        seen: dict[int, Any] = {}
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen:
                continue
            seen[id(node)] = node
            var = getattr(node, "variable", None)
            if var is not None and self.guard.is_original(var):
                raise self.guard.leak(f"the run-dtype parameter {self.guard.name(var)} itself is a leaf of the "
                                      "autograd graph (a custom autograd Function's input?): its gradient would "
                                      "reach it, not its fp64 copy", (self.guard.name(var),))
            todo.extend(n for n, _ in node.next_functions)

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
            out = original(*args, **kwargs)
        if self.guard is not None:
            out = self.guard.swap_in_copies(out)  # a model tensor returned as it is: its whole-copy value
            if self.train and torch.is_grad_enabled():
                self._check_graph(out)
            self.guard.check()
        return out

    def _piece_call(self, module, original, *args, **kwargs):
        if self.guard is not None:  # a parameter passed to a piece as an argument: its fp64 copy
            args, kwargs = self.guard.swap_in_copies((args, kwargs))
        top = self.stack[-1] if self.stack else None
        in_forward = top is not None and top[1] == "forward"  # a piece inside a piece's checkpointed forward
        if in_forward or not (self.train and torch.is_grad_enabled()):
            with upcast(module, self.dtype, self.device, leaves=in_forward) as swapped:
                if in_forward:  # the outer piece's recompute runs this one again: its uses are counted there
                    for i in swapped:
                        top[0].uses[i] += 1
                    self.grads.opened(swapped)
                return original(*args, **kwargs)
        runner = _Runner(self, module, original, args, kwargs)
        anchor = torch.empty(0, requires_grad=True)  # so the piece is differentiated even when no input needs grad
        outs = _Piece.apply(runner, anchor, *runner.tensors())
        runner.flat = [None if isinstance(x, torch.Tensor) else x for x in runner.flat]  # saved by autograd instead
        return runner.rebuild(outs)
