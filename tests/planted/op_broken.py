"""Broken specs and kernels for the one-line errors of `fusecheck op` (exit 2: the spec's fault; exit 3: the
kernel raised) and for the verdicts that must never be a PASS (wrong shape/dtype/kind, empty, all-NaN)."""
from __future__ import annotations

import torch

from fusecheck.op import OpSpec, seeded_randn


class _Rows(OpSpec):
    shapes = [{"m": 4, "n": 6}]
    dtypes = ("fp32",)

    def make_inputs(self, shape, dtype, seed):
        return {"x": seeded_randn((shape["m"], shape["n"]), seed, dtype)}

    def reference(self, x):
        return torch.softmax(x, -1)

    def fused(self, x):
        return torch.softmax(x.float(), -1).to(x.dtype)


class ReferenceRaises(_Rows):
    def reference(self, x):
        raise RuntimeError("the chain is broken")


class InputsNotADict(_Rows):
    def make_inputs(self, shape, dtype, seed):
        return [torch.ones(3)]


class BadSpecialInputs(_Rows):
    special_inputs = {"y": "exact"}


class UnknownPromise(_Rows):
    special_inputs = {"x": "sometimes"}


class KernelRaises(_Rows):
    def fused(self, x):
        raise IndexError("tile index out of range")


class WrongShape(_Rows):
    def fused(self, x):
        return super().fused(x)[:, :-1]


class WrongDtype(_Rows):
    def fused(self, x):
        return super().fused(x).double()


class NotATensor(_Rows):
    def fused(self, x):
        return None


class EmptyOutput(_Rows):
    def reference(self, x):
        return x[:, :0]

    def fused(self, x):
        return x[:, :0].clone()


class AllNaNGolden(_Rows):
    def reference(self, x):
        return x * float("nan")

    def fused(self, x):
        return x * float("nan")


class NotASpec:
    pass
