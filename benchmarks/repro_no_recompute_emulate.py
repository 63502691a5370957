"""Torch-only repro of the interaction fusecheck's matrix names on the transformer block (bf16, training):
`partitioner.no_recompute` + `emulate_precision_casts`. Plain torch.compile, no fusecheck:

    config.patch(emulate_precision_casts=True, custom_partitioner_fn=<AOTAutograd's default_partition>)

Each gradient is compared with an fp64 run of the same weights, inputs and cotangent; the ratio is compiled's
RMSE against fp64 over eager's (fusecheck's "ratio": above 2 is worse than eager). Four builds: Inductor's
defaults, each setting alone, and both.

    python benchmarks/repro_no_recompute_emulate.py [--device cuda] [--seed 0]
"""
from __future__ import annotations

import argparse
import math

import torch
from torch import nn
from torch._functorch.partitioners import default_partition
from torch._inductor.custom_graph_pass import CustomPartitionerFn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


def rotary(x, base=10000.0):
    seq, hd = x.shape[-2], x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd)
    ang = torch.arange(seq, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    """fusecheck/builtin/transformer_block.py's block, copied so that this script needs torch only."""

    def __init__(self, dim=64, heads=4, hidden=128):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def attention(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = rotary(q), rotary(k)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        return self.proj((scores.masked_fill(mask, float("-inf")).softmax(-1) @ v).transpose(1, 2).reshape(b, s, d))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        h = self.norm2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class DefaultPartition(CustomPartitionerFn):
    """AOTAutograd's default partition (save what the forward computed, recompute nothing) as Inductor's
    custom_partitioner_fn - what fusecheck's partitioner.no_recompute toggle installs. Module-level, so that
    Inductor's cache key can pickle it."""

    def __call__(self, gm, joint_inputs, **kwargs):
        kwargs.pop("compiler", None)
        return default_partition(gm, joint_inputs, **kwargs)

    def uuid(self):
        return "repro.default_partition"


def default_partitioner():
    return DefaultPartition()


def grads(model, x, g, fn=None):
    model.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    (model if fn is None else fn)(x).backward(g)
    return {"x": x.grad, **{n: p.grad for n, p in model.named_parameters()}}


def rmse(a, b):
    return (a.double() - b.double()).pow(2).mean().sqrt().item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from torch._inductor import config

    torch.manual_seed(args.seed)
    ref = Block().to(args.device)
    x = torch.randn(2, 16, 64, device=args.device)
    g = torch.randn(2, 16, 64, device=args.device)
    golden = grads(ref.double(), x.double(), g.double())
    model = Block().to(args.device)
    model.load_state_dict(ref.state_dict())
    model = model.to(torch.bfloat16)
    xb, gb = x.bfloat16(), g.bfloat16()
    eager = grads(model, xb, gb)
    builds = {
        "inductor defaults": {},
        "emulate_precision_casts": {"emulate_precision_casts": True},
        "default_partition (no recompute)": {"custom_partitioner_fn": default_partitioner()},
        "both": {"emulate_precision_casts": True, "custom_partitioner_fn": default_partitioner()},
    }
    print(f"torch {torch.__version__}, device {args.device}, bf16, seed {args.seed}; ratio = compiled rmse / eager "
          "rmse against fp64, per gradient")
    for name, patch in builds.items():
        torch._dynamo.reset()
        with config.patch(patch):
            compiled = grads(model, xb, gb, torch.compile(model))
        ratios = {k: rmse(compiled[k], golden[k]) / max(rmse(eager[k], golden[k]), 1e-30) for k in golden}
        worst = sorted(ratios, key=ratios.get, reverse=True)[:3]
        over = sum(r > 2 for r in ratios.values())
        print(f"{name:34s} worst: " + ", ".join(f"{k} {ratios[k]:.3g}x" for k in worst)
              + f"; {over} of {len(ratios)} gradients above 2x")


if __name__ == "__main__":
    main()
