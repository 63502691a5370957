"""Conv -> BatchNorm -> ReLU, twice. BN running statistics are randomized: fresh ones (mean 0, var 1)
make the net trivially exact and would hide folding/fusion errors."""
import torch
from torch import nn

from fusecheck.case import Case


def _randomize_bn(bn: nn.BatchNorm2d) -> None:
    with torch.no_grad():
        bn.running_mean.normal_(0, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.normal_(1, 0.2)
        bn.bias.normal_(0, 0.2)


class ConvBNReLU(nn.Module):
    def __init__(self, cin: int = 3, cmid: int = 8, cout: int = 8):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cmid, 3, padding=1), nn.BatchNorm2d(cmid)
        self.c2, self.b2 = nn.Conv2d(cmid, cout, 3, padding=1), nn.BatchNorm2d(cout)
        _randomize_bn(self.b1)
        _randomize_bn(self.b2)

    def forward(self, x):
        return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))


def build() -> Case:
    return Case(ConvBNReLU(), (torch.randn(2, 3, 16, 16),), "conv_bn_relu")
