"""A generated family of small block models that reach their weights from outside their blocks.

Each seed draws a `Recipe`: a random combination of what everyday code does outside a block and what breaks
a golden that upcasts one piece at a time unless it is as general as a whole-model fp64 copy:

- `dtype_outside`: `x.to(self.layers[0].fc.weight.dtype)` before each block (ViT, the brief's residual model)
- `self_dtype`: `self.dtype` (transformers: the first floating parameter's dtype, a block's here)
- `finfo`: constants from `torch.finfo(self.dtype)` (an eps, and `.min` in an attention mask)
- `shared`: block 1's linear weight is block 0's (weights shared between blocks)
- `twice`: block 0 called again after the stack
- `glob`: blocks are attributes `block0..`, not an nn.ModuleList (found with `--blocks 'block*'`)
- `buffers`: a floating buffer in each block and one at the root
- `param_arg`: the next block's bias passed to a block as an argument
- `autocast`: block 1 runs under `torch.autocast(cpu, bfloat16)`
- `hooks`: a forward pre-hook casting to the block's weight dtype, a forward hook scaling by its weight
- `fp32_residual`: an fp32 residual stream in a low-precision model (`r = r + layer(r.to(w.dtype)).float()`)
- `type_as`: `x.type_as(block.fc.weight)` (a dtype read torch function sees, not Python)
- `root_head`: logits as `F.linear(h, self.embed.weight)` at the root (a tied head outside its piece)
- `cross_ref`: each block adds the next block's `gain`, held as a plain attribute (not a submodule): a
  parameter of another piece used inside a piece
- `nested_unit`: each block calls a root-level MLP held as a plain attribute (a streamed piece inside a
  piece)
- `hard_bf16`: a hard-coded `h.to(torch.bfloat16)` round trip at the root: low precision that the whole
  golden computes too (its semantics are the reference), not a leak
- `complex_buffer`: a complex64 RoPE buffer at the root applied through `view_as_complex` (torchtitan's
  `freqs_cis`): `Module.to(float64)` would drop its imaginary part, so the golden must cast it to complex128
- `attr_tensor`: a floating tensor held as a plain attribute (not a buffer) in each block and at the root,
  read inside and outside the blocks (module state `named_buffers` does not list)
- `bits`: the bits of a kept cast (`h.float().view(torch.int32) & mask`, mantissa truncation as fake-quant
  does) in each block and at the root: the golden keeps the `.float()` in fp64, and the bits it reads must be
  those of eager's fp32 value in both goldens
- `fp32_norm`: each block's norm computes in fp32 (`x.float()`, LlamaRMSNorm's way) and casts back: a kept
  cast inside a piece, which the streamed golden runs again in its backward (the recompute must keep it too)
- `segment_sum`: a kept `.float()` value written by `index_add_` into an fp32 buffer from a factory (an MoE
  combine), at the root
- `vocab`: 11 (the embedding is smaller than a block: upcast for the whole run) or 16 (streamed)
"""
from __future__ import annotations

import random
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from fusecheck.case import Case

PATTERNS = ("dtype_outside", "self_dtype", "finfo", "shared", "twice", "glob", "buffers", "param_arg", "autocast",
            "hooks", "fp32_residual", "type_as", "root_head", "hard_bf16", "cross_ref", "nested_unit",
            "complex_buffer", "attr_tensor", "bits", "segment_sum", "fp32_norm")
HIDDEN, SEQ, N_BLOCKS = 8, 6, 3


@dataclass(frozen=True)
class Recipe:
    seed: int
    dtype_outside: bool = False
    self_dtype: bool = False
    finfo: bool = False
    shared: bool = False
    twice: bool = False
    glob: bool = False
    buffers: bool = False
    param_arg: bool = False
    autocast: bool = False
    hooks: bool = False
    fp32_residual: bool = False
    type_as: bool = False
    root_head: bool = False
    hard_bf16: bool = False
    cross_ref: bool = False
    nested_unit: bool = False
    complex_buffer: bool = False
    attr_tensor: bool = False
    bits: bool = False
    segment_sum: bool = False
    fp32_norm: bool = False
    vocab: int = 11

    @property
    def blocks(self) -> str | None:
        return "block*" if self.glob else None

    def describe(self) -> str:
        on = [f.name for f in fields(self) if f.type in (bool, "bool") and getattr(self, f.name)]
        return f"seed {self.seed}: {'+'.join(on) or 'plain'}, vocab {self.vocab}"


def recipe(seed: int) -> Recipe:
    """Each pattern on with probability 1/2 (seeded), so that every pair of patterns meets in a few seeds."""
    rng = random.Random(seed)
    return Recipe(seed, **{p: rng.random() < 0.5 for p in PATTERNS}, vocab=rng.choice((11, 16)))


def truncated(h: torch.Tensor) -> torch.Tensor:
    """h's fp32 value with the low 16 mantissa bits cleared, in h's dtype (reads the bits of a kept cast)."""
    return (h.float().view(torch.int32) & -65536).view(torch.float32).to(h.dtype)


class Block(torch.nn.Module):
    def __init__(self, hidden: int, buffers: bool, attr_tensor: bool = False, bits: bool = False,
                 fp32_norm: bool = False):
        super().__init__()
        self.bits, self.fp32_norm = bits, fp32_norm
        self.norm = torch.nn.LayerNorm(hidden)
        self.fc = torch.nn.Linear(hidden, hidden)
        self.gain = torch.nn.Parameter(1 + 0.1 * torch.randn(hidden))
        if buffers:
            self.register_buffer("scale", 1 + 0.05 * torch.randn(hidden))
        else:
            self.scale = None
        self.offset = 0.05 * torch.randn(hidden) if attr_tensor else None
        self.peer: list = []  # plain attributes: not submodules, not parameters of this block
        self.mix: list = []

    def forward(self, x, extra=None):
        if self.fp32_norm:  # LlamaRMSNorm: in fp32, cast back to the block's dtype
            h = x.float()
            h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.norm.weight
        else:
            h = self.norm(x)
        y = torch.tanh(self.fc(h)) * self.gain
        if self.scale is not None:
            y = y * self.scale
        if extra is not None:
            y = y + extra
        if self.offset is not None:
            y = y + self.offset
        if self.peer:  # another block's parameter, reached from inside this one
            y = y + 0.1 * self.peer[0]
        if self.bits:
            y = y + 0.1 * truncated(y)
        if self.mix:  # a piece of its own (larger than a block: streamed), called inside this one
            y = y + 0.1 * self.mix[0](y.to(self.mix[0][0].weight.dtype)).to(y.dtype)
        return y


class FamilyModel(torch.nn.Module):
    def __init__(self, r: Recipe):
        super().__init__()
        self.r = r
        blocks = [Block(HIDDEN, r.buffers, r.attr_tensor, r.bits, r.fp32_norm) for _ in range(N_BLOCKS)]
        if r.glob:  # registered first, so that the first parameter (self.dtype) is a block's
            for i, b in enumerate(blocks):
                setattr(self, f"block{i}", b)
        else:
            self.layers = torch.nn.ModuleList(blocks)
        self.embed = torch.nn.Embedding(r.vocab, HIDDEN)
        self.pos = torch.nn.Parameter(0.1 * torch.randn(SEQ, HIDDEN))
        self.out_norm = torch.nn.LayerNorm(HIDDEN)
        if not r.root_head:
            self.head = torch.nn.Linear(HIDDEN, r.vocab)
        if r.buffers:
            self.register_buffer("root_scale", 1 + 0.05 * torch.randn(HIDDEN))
        if r.shared:
            blocks[1].fc.weight = blocks[0].fc.weight
        if r.cross_ref:
            for i, b in enumerate(blocks):
                b.peer.append(blocks[(i + 1) % N_BLOCKS].gain)
        if r.nested_unit:
            self.mix = torch.nn.Sequential(torch.nn.Linear(HIDDEN, 2 * HIDDEN), torch.nn.Tanh(),
                                           torch.nn.Linear(2 * HIDDEN, HIDDEN))
            for b in blocks:
                b.mix.append(self.mix)
        if r.attr_tensor:
            self.root_offset = 0.05 * torch.randn(HIDDEN)
        if r.complex_buffer:
            self.register_buffer("freqs", torch.polar(torch.ones(SEQ, HIDDEN // 2), torch.randn(SEQ, HIDDEN // 2)))
        if r.hooks:
            blocks[1].register_forward_pre_hook(lambda m, args: (args[0].to(m.fc.weight.dtype) * 1.0, *args[1:]))
            blocks[1].register_forward_hook(lambda m, args, out: out * m.gain.mean())

    @property
    def dtype(self) -> torch.dtype:  # as transformers' ModuleUtilsMixin.dtype
        return next(p.dtype for p in self.parameters() if p.is_floating_point())

    def stack(self) -> list[Block]:
        return [getattr(self, f"block{i}") for i in range(N_BLOCKS)] if self.r.glob else list(self.layers)

    def forward(self, ids):
        r, blocks = self.r, self.stack()
        w = blocks[0].fc.weight  # a block's weight, read outside that block
        h = self.embed(ids) + self.pos
        if r.complex_buffer:  # rotate pairs of features by the buffer's phases, in its real precision
            pairs = torch.view_as_complex(h.to(self.freqs.real.dtype).reshape(*h.shape[:-1], HIDDEN // 2, 2)
                                          .contiguous())
            h = torch.view_as_real(pairs * self.freqs).reshape(h.shape).to(h.dtype)
        if r.fp32_residual:
            h = h.float()
        for i, layer in enumerate(blocks):
            x = h.to(w.dtype) if (r.dtype_outside or r.fp32_residual) else h
            if r.type_as:
                x = x.type_as(blocks[-1].fc.weight)
            extra = blocks[(i + 1) % N_BLOCKS].fc.bias if r.param_arg else None
            if r.autocast and i == 1:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    y = layer(x, extra)
            else:
                y = layer(x, extra)
            h = h + (y.float() if r.fp32_residual else y)
        if r.twice:
            y = blocks[0](h.to(w.dtype))
            h = h + (y.float() if r.fp32_residual else y)
        if r.self_dtype:
            h = h + torch.full((HIDDEN,), 0.01, dtype=self.dtype, device=h.device)
        if r.finfo:
            info = torch.finfo(self.dtype)
            h = h / (h.pow(2).mean(-1, keepdim=True) + 1e3 * info.eps).sqrt()
            scores = h @ h.transpose(-1, -2)
            causal = torch.ones(SEQ, SEQ, dtype=torch.bool, device=h.device).triu(1)
            low = max(info.min, torch.finfo(scores.dtype).min)  # an fp32 stream cannot hold fp64's min
            h = scores.masked_fill(causal, low).softmax(-1) @ h
        if r.buffers:
            h = h * self.root_scale
        if r.attr_tensor:
            h = h + self.root_offset
        if r.hard_bf16:
            h = h.to(torch.bfloat16).to(h.dtype)
        if r.bits:
            h = h + truncated(h)
        if r.segment_sum:  # positions summed into 3 segments in fp32, read back per position
            seg = torch.arange(SEQ, device=h.device) % 3
            acc = torch.zeros(h.shape[0], 3, HIDDEN, dtype=torch.float32, device=h.device)
            acc.index_add_(1, seg, h.float())
            h = h + 0.1 * acc[:, seg].to(h.dtype)
        h = self.out_norm(h.to(self.out_norm.weight.dtype))
        return F.linear(h, self.embed.weight) if r.root_head else self.head(h)


def build_case(r: Recipe) -> Case:
    torch.manual_seed(1000 + r.seed)
    model = FamilyModel(r)
    ids = torch.randint(0, r.vocab, (2, SEQ))
    return Case(model, (ids,), f"family_{r.seed}")
