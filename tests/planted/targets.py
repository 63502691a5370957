"""Tiny fp32 targets for the planted culprits (plain model code; the bugs are in the compiler plants).

Each function is a `FILE.py:NAME` target for `fusecheck bisect` as well.
"""
import torch


class SumNorm(torch.nn.Module):          # pattern pass plant: rewrites the sum
    def forward(self, x):
        return x / (x * x).sum(-1, keepdim=True)


class Standardize(torch.nn.Module):      # decomposition plant: var_mean
    def forward(self, x):
        v, m = torch.var_mean(x, -1, keepdim=True, correction=0)
        return (x - m) * torch.rsqrt(v + 1e-5)


class Center(torch.nn.Module):           # fusion plant: mean (reduction) fused with sub
    def forward(self, x):
        return x - x.mean(-1, keepdim=True)


class ExpMix(torch.nn.Module):           # inlining plant: exp inlined into its consumer
    def forward(self, x):
        return torch.exp(x) * 0.5 + x


class StandardizeExp(torch.nn.Module):   # two plants: var_mean decomposition and exp inlining
    def forward(self, x):
        v, m = torch.var_mean(x, -1, keepdim=True, correction=0)
        y = (x - m) * torch.rsqrt(v + 1e-5)
        return torch.exp(y) * 0.5 + y


class Benign(torch.nn.Module):           # bf16: fusion changes bits (fp32 intermediates) but is not worse
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)

    def forward(self, x):
        y = torch.nn.functional.gelu(self.lin(x)) * 1.7 + 0.1
        return torch.softmax(y, -1)


def _x(offset=0.0, scale=1.0):
    return torch.randn(32, 64) * scale + offset


def sum_norm():
    return SumNorm(), _x()


def standardize():
    return Standardize(), _x(offset=300.0)   # large mean: E[x^2]-E[x]^2 cancels catastrophically


def center():
    return Center(), _x(scale=10.0)


def exp_mix():
    return ExpMix(), _x()


def standardize_exp():
    return StandardizeExp(), _x(offset=300.0)


def benign():
    return Benign(), torch.randn(16, 32)


class LayerNorm(torch.nn.Module):        # layer_norm decomposition plant (an op with no Inductor lowering)
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(64)

    def forward(self, x):
        return self.ln(x) * 2 + 1


class BreakMM(torch.nn.Module):          # custom pre-pass plant: mm under a sigmoid, after a graph break
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x):
        y = torch.tanh(self.l1(x))
        torch._dynamo.graph_break()
        return torch.sigmoid(self.l2(y)) * 3


def layer_norm():
    return LayerNorm(), _x(offset=300.0)


def break_mm():
    return BreakMM(), torch.randn(8, 16)
