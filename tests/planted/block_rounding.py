"""A per-block plant: when compiled, block 2 of a four-block fp32 stack cuts its output to bf16
precision.

End to end, the error is carried through blocks 3 and the final norm; per block, only block 2 is worse.
"""
from pathlib import Path

import torch

from fusecheck.case import load_object

_WIDE = Path(__file__).resolve().parents[2] / "models" / "wide_blocks.py"
WideBlock, _case = load_object(f"{_WIDE}:WideBlock"), load_object(f"{_WIDE}:_case")

PLANTED_BLOCK = 2


class RoundsWhenCompiled(WideBlock):
    def forward(self, x):
        out = super().forward(x)
        if torch.compiler.is_compiling() and self.index == PLANTED_BLOCK:
            # bf16 precision by masking the low 16 bits (a to(bf16).to(fp32) round trip is elided by Inductor)
            cut = (out.view(torch.int32) & -65536).view(torch.float32)
            out = out + (cut - out).detach()  # the value cut, the gradient passed through
        return out


def build():
    return _case(32, 4, 8, "block_rounding", block=RoundsWhenCompiled)
