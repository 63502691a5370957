"""Registry of the optimizers a training check runs: a name, its default learning rate, how to build it.

Every trajectory (eager, compiled, the fp64 shadow, the band runs) gets its own optimizer of the same kind and
hyperparameters over its own master weights, so the optimizer state is in the master dtype of that trajectory
(fp32 for eager and compiled, fp64 for the shadow). torch is imported inside the builders: the CLI reads the
names for `--optimizer` without loading it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


def _adamw(params: list, lr: float) -> Any:
    import torch
    return torch.optim.AdamW(params, lr=lr)


def _sgd(params: list, lr: float) -> Any:
    import torch
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


@dataclass(frozen=True)
class OptimizerKind:
    name: str
    doc: str
    lr: float  # the default learning rate
    make: Callable[[list, float], Any]


OPTIMIZERS: dict[str, OptimizerKind] = {
    "adamw": OptimizerKind("adamw", "torch.optim.AdamW (betas 0.9, 0.999; weight decay 0.01)", 1e-3, _adamw),
    "sgd": OptimizerKind("sgd", "torch.optim.SGD with momentum 0.9", 1e-1, _sgd),
}
