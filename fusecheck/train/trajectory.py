"""One training trajectory: its own master weights and optimizer state, stepped through a shared model.

Eager, compiled and the band runs share one model in the op dtype: before each step a trajectory copies its
masters into the model's parameters (rounding to the op dtype, as mixed precision does), runs forward, loss and
backward, takes the gradients into its masters (fp32) and steps its optimizer. In fp32 the copy is exact, so a
trajectory is plain fp32 training. The shadow owns its model (fp64): its parameters are its masters. One model
for all keeps memory at one model plus, per trajectory, masters and optimizer state.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from fusecheck.train.data import Stream
from fusecheck.train.optimizers import OptimizerKind


class Trajectory:
    def __init__(self, name: str, model: torch.nn.Module, master_dtype: torch.dtype, optimizer: OptimizerKind,
                 lr: float, *, own_model: bool = False):
        self.name, self.model = name, model
        self.params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        if own_model:  # the shadow: its fp64 parameters are its masters
            self.masters = self.params
        else:
            self.masters = {n: p.detach().to(master_dtype).clone() for n, p in self.params.items()}
        self.optimizer = optimizer.make(list(self.masters.values()), lr)
        self.update: Callable[[], Any] = self.optimizer.step
        self.buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
        self.losses: list[float] = []

    @property
    def shares_model(self) -> bool:
        return self.masters is not self.params

    def load(self) -> None:
        """The model's parameters take this trajectory's masters; its buffers their starting values (the model
        runs in eval mode: a buffer a forward changes, a cache, starts every step as at step 0)."""
        with torch.no_grad():
            if self.shares_model:
                for n, p in self.params.items():
                    p.copy_(self.masters[n])
            named = dict(self.model.named_buffers())
            for n, b in self.buffers.items():
                if n in named and named[n].shape == b.shape:
                    named[n].copy_(b)

    def take_grads(self) -> None:
        if not self.shares_model:
            return
        for n, p in self.params.items():
            g, p.grad = p.grad, None
            self.masters[n].grad = None if g is None else g.to(self.masters[n].dtype)

    def step(self, fn: Callable[..., Any], stream: Stream, step: int, batch: tuple, acc: torch.dtype,
             ctx: Any = None) -> torch.Tensor:
        """One optimizer step on `batch` with `fn` (the model, or its compiled form) under `ctx`; the loss."""
        self.load()
        for p in self.params.values():
            p.grad = None
        with ctx if ctx is not None else contextlib.nullcontext():
            with torch.enable_grad():
                loss = stream.loss(fn(*batch), batch, acc)
                loss.backward()
            self.take_grads()
            self.update()
        self.optimizer.zero_grad(set_to_none=True)
        value = loss.detach()
        self.losses.append(float(value))
        return value
