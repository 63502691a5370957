"""Real architectures from the transformers library, built from tiny configs with random weights.

Optional: needs `pip install fusecheck[models]`; nothing is downloaded (configs are built in code).
"""
import torch

from fusecheck.case import Case, TargetError


def _transformers():
    try:
        import transformers
    except ImportError as exc:
        raise TargetError("models/hf.py needs the optional 'transformers' package: pip install -e '.[models]'") from exc
    return transformers


class _LogitsOnly(torch.nn.Module):
    """Return the logits tensor only, so outputs are plain tensors and no cache objects are compared."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def build_llama() -> Case:
    tf = _transformers()
    cfg = tf.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return Case(_LogitsOnly(tf.LlamaForCausalLM(cfg)), (torch.randint(0, 128, (2, 16)),), "tiny_llama")


def build_gpt2() -> Case:
    tf = _transformers()
    cfg = tf.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return Case(_LogitsOnly(tf.GPT2LMHeadModel(cfg)), (torch.randint(0, 128, (2, 16)),), "tiny_gpt2")
