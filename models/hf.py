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


class _Field(torch.nn.Module):
    """Call the model with one keyword input and return one tensor field of its output (no cache objects)."""

    def __init__(self, model, arg: str, field: str = "logits"):
        super().__init__()
        self.model, self.arg, self.field = model, arg, field

    def forward(self, x):
        return getattr(self.model(**{self.arg: x}), self.field)


def build_bert() -> Case:
    tf = _transformers()
    cfg = tf.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    return Case(_Field(tf.BertForMaskedLM(cfg), "input_ids"), (torch.randint(0, 128, (2, 16)),), "tiny_bert")


def build_qwen2() -> Case:
    tf = _transformers()
    cfg = tf.Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return Case(_LogitsOnly(tf.Qwen2ForCausalLM(cfg)), (torch.randint(0, 128, (2, 16)),), "tiny_qwen2")


def build_mixtral() -> Case:
    """A mixture of experts: top-2 routing over 4 experts (routing decisions are part of what is judged)."""
    tf = _transformers()
    cfg = tf.MixtralConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                           num_local_experts=4, num_experts_per_tok=2)
    return Case(_LogitsOnly(tf.MixtralForCausalLM(cfg)), (torch.randint(0, 128, (2, 16)),), "tiny_mixtral")


def build_vit() -> Case:
    tf = _transformers()
    cfg = tf.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=128, num_labels=10, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0)
    return Case(_Field(tf.ViTForImageClassification(cfg), "pixel_values"), (torch.randn(2, 3, 32, 32),), "tiny_vit")


def build_resnet() -> Case:
    tf = _transformers()
    cfg = tf.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                          layer_type="basic", num_labels=10)
    return Case(_Field(tf.ResNetForImageClassification(cfg), "pixel_values"), (torch.randn(2, 3, 32, 32),),
                "tiny_resnet")


def build_mobilenet_v2() -> Case:
    """ReLU6 (hardtanh 0..6) after every batch norm: in bf16, whose spacing at 6 is 1/32, many activations sit
    on a bound within rounding, and which side each run takes routes the gradient."""
    tf = _transformers()
    cfg = tf.MobileNetV2Config(num_channels=3, image_size=32, depth_multiplier=0.35, num_labels=10)
    return Case(_Field(tf.MobileNetV2ForImageClassification(cfg), "pixel_values"), (torch.randn(2, 3, 32, 32),),
                "tiny_mobilenet_v2")
