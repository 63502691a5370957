"""A MoE-style block model whose expert matmul has no fp64 kernel (as MoE's `torch._grouped_mm`): the golden
must run that op in fp32 (golden_fallback.py) and say so, in one process and on every rank of a sharded check.

`grouped_mm` refuses float64 with the error such kernels give; its autograd uses the op itself, so the
backward pass of the golden needs the fallback too. Routing is a top-1 choice (a discrete decision).
"""
import torch

from fusecheck.case import Case

EXPERTS, HIDDEN, TOKENS = 4, 16, 8


@torch.library.custom_op("fusecheck_planted::grouped_mm", mutates_args=())
def grouped_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [E, n, d] @ w [E, d, k]; no float64 kernel."""
    if torch.float64 in (x.dtype, w.dtype):
        raise RuntimeError(f"grouped_mm: expected Float32, BFloat16 or Float16, got {x.dtype} and {w.dtype}")
    return torch.bmm(x, w)


@grouped_mm.register_fake
def _(x, w):
    return x.new_empty((x.shape[0], x.shape[1], w.shape[2]))


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    return (torch.ops.fusecheck_planted.grouped_mm(grad, w.transpose(1, 2).contiguous()),
            torch.ops.fusecheck_planted.grouped_mm(x.transpose(1, 2).contiguous(), grad))


grouped_mm.register_autograd(_backward, setup_context=_setup)


class MoEBlock(torch.nn.Module):
    """Pre-norm, a top-1 router, every expert computed densely (no data-dependent shapes) and masked."""

    def __init__(self, hidden: int = HIDDEN, experts: int = EXPERTS):
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden)
        self.router = torch.nn.Linear(hidden, experts)
        self.experts = torch.nn.Parameter(torch.randn(experts, hidden, hidden) / hidden ** 0.5)

    def forward(self, x):
        h = self.norm(x)
        weight, index = self.router(h).softmax(-1).topk(1, dim=-1)
        out = torch.ops.fusecheck_planted.grouped_mm(h.expand(self.experts.shape[0], *h.shape).contiguous(),
                                                     self.experts)
        mask = torch.nn.functional.one_hot(index[:, 0], self.experts.shape[0]).to(h.dtype) * weight
        return x + torch.einsum("ne,end->nd", mask, out)


class MoEStack(torch.nn.Module):
    def __init__(self, blocks: int = 2):
        super().__init__()
        self.layers = torch.nn.ModuleList(MoEBlock() for _ in range(blocks))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def build() -> Case:
    torch.manual_seed(0)
    return Case(MoEStack(), (torch.randn(TOKENS, HIDDEN),), "moe_no_fp64")
