"""Real-size Llama shapes (transformers configs, random weights, nothing downloaded), for the streamed golden's
memory benchmarks on a GPU. Built directly on CUDA in bf16 when a GPU is present (an 8B model initialised on
the host would take minutes), else on the host.

`FUSECHECK_SEQ` sets the sequence length (default 512), `FUSECHECK_LAYERS` overrides the layer count.
"""
import os

import torch

from fusecheck.case import Case
from hf import _LogitsOnly, _transformers  # models/ is on the path while fusecheck loads a target

SHAPES = {  # hidden, intermediate, layers, heads, kv heads, vocab
    "1b": (2048, 5632, 22, 32, 4, 32000),      # TinyLlama-1.1B
    "8b": (4096, 14336, 32, 32, 8, 128256),    # Llama-3-8B
    "13b": (5120, 13824, 40, 40, 40, 32000),   # Llama-2-13B
    "70b": (8192, 28672, 80, 64, 8, 128256),   # Llama-3-70B
}


def build(shape: str) -> Case:
    tf = _transformers()
    hidden, inter, layers, heads, kv, vocab = SHAPES[shape]
    layers = int(os.environ.get("FUSECHECK_LAYERS", layers))
    seq = int(os.environ.get("FUSECHECK_SEQ", 512))
    cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=max(seq, 2048))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = tf.LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(previous)
    ids = torch.randint(0, vocab, (1, seq)).to(device)  # fusecheck seeds the global generator
    return Case(_LogitsOnly(model), (ids,), f"llama_{shape}")


def build_1b() -> Case:
    return build("1b")


def build_8b() -> Case:
    return build("8b")


def build_13b() -> Case:
    return build("13b")


def build_70b() -> Case:
    return build("70b")
