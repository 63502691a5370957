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
