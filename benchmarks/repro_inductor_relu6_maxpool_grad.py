"""Plain torch.compile, no fusecheck in the loop: stock Inductor on this CPU (torch 2.13) returns an all-zero
gradient for the first conv of conv -> ReLU6 -> MaxPool2d -> conv -> Hardtanh -> flatten -> linear, in fp32,
where eager's is ~114 (found by a red team of the rolled call, 2026-12-07; average pooling instead of max,
or no tail after the pool, does not reproduce it). `fusecheck check` FAILs it `worse_than_eager` on the
conv's weight, bias and the input gradient:

    python benchmarks/repro_inductor_relu6_maxpool_grad.py
    fusecheck check benchmarks/repro_inductor_relu6_maxpool_grad.py:build --train
"""
from __future__ import annotations

import sys

import torch
from torch import nn


class ClipCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.a1, self.a2, self.pool = nn.ReLU6(), nn.Hardtanh(), nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        x = self.pool(self.a1(self.c1(x)))
        return self.fc(self.a2(self.c2(x)).flatten(1))


def build():
    torch.manual_seed(0)
    return ClipCNN(), torch.randn(4, 3, 16, 16)


def main() -> int:
    model, x = build()

    def grad_sum(fn) -> float:
        model.zero_grad(set_to_none=True)
        fn(x.clone().requires_grad_()).sum().backward()
        return float(model.c1.weight.grad.abs().sum())
    eager, compiled = grad_sum(model), grad_sum(torch.compile(model))
    print(f"sum |grad c1.weight|: eager {eager:.6g}, compiled {compiled:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
