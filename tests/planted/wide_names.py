"""A model whose parameters are named as a transformers causal LM's (`model.model.layers.11.self_attn.q_proj`),
tiny, for the tests of how every command's table shows long row names."""
import torch
from torch import nn

from fusecheck.case import Case


class Attention(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x):
        att = torch.softmax(self.q_proj(x) @ self.k_proj(x).transpose(-1, -2), -1)
        return self.o_proj(att @ self.v_proj(x))


class MLP(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False)
        self.down_proj = nn.Linear(2 * d, d, bias=False)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn, self.mlp = Attention(d), MLP(d)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, d: int, layers: int, vocab: int):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Layer(d) for _ in range(layers))
        self.norm = nn.LayerNorm(d)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class CausalLM(nn.Module):
    def __init__(self, d: int = 8, layers: int = 12, vocab: int = 16):
        super().__init__()
        self.model = Decoder(d, layers, vocab)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        return self.lm_head(self.model(ids))


class Wrapped(nn.Module):
    """As models/hf.py wraps a transformers model: the row names start `grad.model.model.`."""

    def __init__(self, **kw):
        super().__init__()
        self.model = CausalLM(**kw)

    def forward(self, ids):
        return self.model(ids)


def build(layers: int = 12) -> Case:
    return Case(Wrapped(layers=layers), (torch.randint(0, 16, (2, 6)),), "wide_names")
