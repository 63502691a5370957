"""Tiny fp32 targets for the planted culprits of the bisector's second round (plain model code)."""
import torch


class ExpSumChain(torch.nn.Module):      # fusion_pair plant: mean -> exp -> sum -> div, one fused chain
    def forward(self, x):
        e = torch.exp(x - x.mean(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True), e   # e is an output too: realized, its own scheduler node


def exp_sum_chain():
    return ExpSumChain(), torch.randn(32, 64)


class ScaledSoftmax(torch.nn.Module):    # softmax_pass plant: a softmax the pass matches once decomposed
    def forward(self, x):
        return torch.softmax(x * 0.25, -1) * 8.0 + x


def scaled_softmax():
    return ScaledSoftmax(), torch.randn(32, 64) * 4


class TanhExpMLP(torch.nn.Module):       # rounding_backend plant: a small graph with one exp among other ops
    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        h = torch.tanh(self.lin1(x))
        g = torch.exp(h) * 0.5 + h
        return self.lin2(torch.relu(g - 0.25))


def tanh_exp_mlp():
    return TanhExpMLP(), torch.randn(8, 16)
