"""Mixed-precision block models that read their weights' dtype outside the blocks, and user backends.

`residual_build`: a bf16 stack of blocks with an fp32 residual stream (`r = x.float()`, each block fed
`r.to(self.layers[0].fc.weight.dtype)`, its output added back `.float()`), `self.dtype` and `torch.finfo`
constants outside the blocks. `casts_build`: the same reads in an fp32 model whose blocks take
`x.to(self.dtype)`. Both are judged with the streamed golden (the default: they have blocks), which must
give the whole-model golden.

Backends: `faithful` runs the captured graph as it is (a user backend that must PASS); `drop_upcast`
(tests/planted/backends.py) loses the fp32 residual; `bf16_matmul` computes the matmuls in bf16.
"""
import torch
from torch.fx import Interpreter

from fusecheck.case import Case

HIDDEN, SEQ = 32, 16


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.fc = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x):
        return 0.05 * torch.tanh(self.fc(self.norm(x)))


class Stack(torch.nn.Module):
    def __init__(self, n_blocks: int, fp32_residual: bool):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block() for _ in range(n_blocks))
        self.head = torch.nn.Linear(HIDDEN, HIDDEN)
        self.fp32_residual = fp32_residual

    @property
    def dtype(self) -> torch.dtype:  # as transformers'
        return next(p.dtype for p in self.parameters() if p.is_floating_point())

    def forward(self, x):
        w = self.layers[0].fc.weight
        r = x.float() if self.fp32_residual else x.to(self.dtype)
        eps = torch.finfo(self.dtype).eps  # a dtype-dependent constant, read outside every block
        for layer in self.layers:
            y = layer(r.to(w.dtype))
            r = r + (y.float() if self.fp32_residual else y)
        r = r / (r.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        return self.head(r.to(self.head.weight.dtype))


def _case(n_blocks: int, fp32_residual: bool, name: str, dtype: torch.dtype) -> Case:
    torch.manual_seed(0)
    model = Stack(n_blocks, fp32_residual).to(dtype)
    return Case(model, (3 * torch.randn(2, SEQ, HIDDEN, dtype=dtype),), name)


def residual_build() -> Case:
    """bf16 weights, fp32 residual stream: run it with `--dtype` left out (the model's own bf16)."""
    return _case(24, True, "fp32_residual", torch.bfloat16)


def casts_build() -> Case:
    return _case(4, False, "dtype_casts", torch.float32)


def faithful(gm, example_inputs):
    """A user backend that runs the captured graph node by node, changing nothing."""
    return lambda *args: Interpreter(gm).run(*args)
