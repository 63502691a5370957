"""Models built on the meta device, for `fusecheck check --nproc N` (or under torchrun): their parameters take
no memory until each rank has sharded them and allocated its own shard (fusecheck/sharded/shard.py), so a
model that no single device holds can be checked. Random weights, nothing downloaded.

Buffers must hold real values (a meta buffer has none to give): modules that compute buffers when built
(rotary tables) are rebuilt on the host after the meta construction.
"""
import os

import torch

from fusecheck.case import Case
from hf import _LogitsOnly, _transformers  # models/ is on the path while fusecheck loads a target
from scale import SHAPES
from wide_blocks import WideStack


def llama_on_meta(hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int, seq: int,
                  batch: int = 1, name: str = "llama_meta") -> Case:
    tf = _transformers()
    cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=max(seq, 2048))
    with torch.device("meta"):
        model = tf.LlamaForCausalLM(cfg)
    model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg)  # its inv_freq buffer, on the host
    ids = torch.randint(0, vocab, (batch, seq))  # fusecheck seeds the global generator
    return Case(_LogitsOnly(model), (ids,), name)


def build_70b_meta() -> Case:
    """Llama-3-70B's shape (hidden 8192, 80 layers, 64 heads, 8 KV heads, ~70.6 B parameters), sequence 512
    (`FUSECHECK_SEQ`; `FUSECHECK_LAYERS` overrides the layer count)."""
    hidden, inter, layers, heads, kv, vocab = SHAPES["70b"]
    layers = int(os.environ.get("FUSECHECK_LAYERS", layers))
    return llama_on_meta(hidden, inter, layers, heads, kv, vocab, int(os.environ.get("FUSECHECK_SEQ", 512)),
                         name="llama_70b_meta")


def build_70b_meta_tp() -> Case:
    """The 70 B shape with tensor parallelism inside each layer (the fp64 golden then holds one block shard)."""
    case = build_70b_meta()
    case.model.fusecheck_tp_plan = llama_tp_plan()
    case.name = "llama_70b_meta_tp"
    return case


def build_tiny_meta() -> Case:
    """The tiny Llama of models/hf.py, on the meta device (tests)."""
    return llama_on_meta(64, 128, 2, 4, 2, 128, 16, batch=2, name="tiny_llama_meta")


def build_wide_meta() -> Case:
    """models/wide_blocks.py's 0.5 B stack (8 blocks of width 2816) on the meta device: measures what a rank
    holds (its shard, one block gathered by FSDP, one fp64 block) on the host."""
    with torch.device("meta"):
        model = WideStack(2816, 8)
    return Case(model, (torch.randn(16, 2816),), "wide_blocks_0p5b_meta")


def llama_tp_plan() -> dict:
    """Megatron-style tensor parallelism of a transformers Llama decoder layer (names inside one layer):
    q/k/v and gate/up split by output features, o/down by input features (one all-reduce each)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    return {**{f"self_attn.{n}": ColwiseParallel() for n in ("q_proj", "k_proj", "v_proj")},
            "self_attn.o_proj": RowwiseParallel(),
            **{f"mlp.{n}": ColwiseParallel() for n in ("gate_proj", "up_proj")}, "mlp.down_proj": RowwiseParallel()}


def build_tiny_meta_tp() -> Case:
    """The tiny Llama on meta, asking the sharded check for tensor parallelism inside each layer."""
    case = build_tiny_meta()
    case.model.fusecheck_tp_plan = llama_tp_plan()
    case.name = "tiny_llama_meta_tp"
    return case
