"""A stack of wide MLP blocks (pre-norm, residual), the shape that makes a model large: used to measure the
streamed golden's memory (about 0.5 B parameters with `build_half_billion`) and, tiny, in tests.

Blocks live in an nn.ModuleList, as in every transformers/timm model, so fusecheck finds them by itself.
"""
import torch

from fusecheck.case import Case


class WideBlock(torch.nn.Module):
    def __init__(self, hidden: int, index: int):
        super().__init__()
        self.index = index
        self.norm = torch.nn.LayerNorm(hidden)
        self.up = torch.nn.Linear(hidden, 4 * hidden)
        self.down = torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class WideStack(torch.nn.Module):
    def __init__(self, hidden: int, n_blocks: int, block=WideBlock):
        super().__init__()
        self.embed = torch.nn.Linear(hidden, hidden)
        self.blocks = torch.nn.ModuleList(block(hidden, i) for i in range(n_blocks))
        self.norm = torch.nn.LayerNorm(hidden)

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.norm(h)


def _case(hidden: int, n_blocks: int, tokens: int, name: str, block=WideBlock, dtype=torch.float32) -> Case:
    model = WideStack(hidden, n_blocks, block).to(dtype)
    return Case(model, (torch.randn(tokens, hidden).to(dtype),), name)


def build() -> Case:
    """Tiny: 4 blocks of width 32 (tests)."""
    return _case(32, 4, 8, "wide_blocks")


def build_half_billion() -> Case:
    """8 blocks of width 2816: 0.51 B parameters (1.0 GB in bf16), built directly in bf16."""
    torch.set_default_dtype(torch.bfloat16)
    try:
        return _case(2816, 8, 16, "wide_blocks_0p5b", dtype=torch.bfloat16)
    finally:
        torch.set_default_dtype(torch.float32)
