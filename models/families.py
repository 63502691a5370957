"""Architecture families with randomised tiny configs, for testing the verdict on a distribution of models
(benchmarks/verdict_stability.py, issue 27).

Each family draws a config from a seed and builds a tiny model from it (transformers configs, random weights,
nothing downloaded; timm families only where timm imports):

    case, config = draw("llama", 3)          # the same (case, config) for the same (family, seed)
    config = draw_config("llama", 3)         # the config alone, no model built (cheap)

`FAMILIES = {name: Family}`; a Family is callable as `FAMILIES[name](seed) -> (Case, config)`. `family(name)` also
answers the held-out families `any:<model type>` (models/any_causal_lm.py, models/any_image_classifier.py,
models/any_text_encoder.py, models/any_seq2seq_lm.py; `held_out()` lists them), which every
function here takes as a family name. The config is
a plain JSON-able dict: what was drawn (sizes, heads and KV heads, layers, activation, biases, tied embeddings,
norm placement, positions, batch and sequence...). It is a pure function of (family, seed): a
`random.Random` seeded with the string "family/seed" (Python hashes string seeds with SHA-512: the same draw
in every process and Python version); the weights come from torch's global generator seeded with a number
derived from the same string, then the inputs from it too.

Batch-norm running statistics and affine parameters are randomised (fresh ones, mean 0 and var 1, make a conv
net trivially exact: models/conv_bn_relu.py); dropout and drop-path are 0 and the models run in eval mode.
"""
from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass
from typing import Callable

import torch

from fusecheck.case import Case, TargetError


def _transformers():
    try:
        import transformers
    except ImportError as exc:
        raise TargetError("models/families.py needs the optional 'transformers' package: "
                          "pip install -e '.[models]'") from exc
    return transformers


def timm_status() -> str | None:
    """None when timm imports; else why not (on CPU torch here: its torchvision does not load)."""
    try:
        import timm  # noqa: F401
    except Exception as exc:  # ImportError, or torchvision's own failure to load its ops
        return f"timm does not import: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    return None


# ---- wrappers: positional tensors in, one tensor out (no cache objects, no dataclass outputs) ----------

class Logits(torch.nn.Module):
    """Call `model` with the positional inputs as the keywords `names` (plus `fixed` keywords) and return
    one field of its output."""

    def __init__(self, model, names: tuple[str, ...], field: str = "logits", **fixed):
        super().__init__()
        self.model, self.names, self.field, self.fixed = model, tuple(names), field, fixed

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)), **self.fixed)
        return getattr(out, self.field)


def randomize_batch_norms(model: torch.nn.Module) -> int:
    """Random running statistics and affine parameters for every batch norm (see models/conv_bn_relu.py);
    returns how many."""
    n = 0
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.normal_(0, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                if m.weight is not None:
                    m.weight.normal_(1, 0.2)
                    m.bias.normal_(0, 0.2)
                n += 1
    return n


# ---- shared draws ---------------------------------------------------------------------------------------

def _heads(rng: random.Random, head_dims=(8, 16, 32), heads=(1, 2, 3, 4, 6, 8), lo=16, hi=128):
    """(heads, head_dim, kv_heads): kv_heads divides heads."""
    combos = [(h, d) for h in heads for d in head_dims if lo <= h * d <= hi]
    h, d = rng.choice(combos)
    return h, d, rng.choice([k for k in range(1, h + 1) if h % k == 0])


def _tokens(rng: random.Random, seq=(3, 24), batch=(1, 3)) -> dict:
    return {"batch": rng.randint(*batch), "seq": rng.randint(*seq), "vocab": rng.randint(40, 300)}


def _common(rng: random.Random) -> dict:
    return {"layers": rng.randint(1, 3), "init_std": rng.choice([0.02, 0.05, 0.1]),
            "tied": rng.random() < 0.5, "eps": rng.choice([1e-5, 1e-6])}


def _inter(rng: random.Random, hidden: int) -> int:
    return rng.randint(hidden, 4 * hidden)


def _rope(rng: random.Random, partial: float | None = None) -> dict:
    p = {"rope_type": rng.choice(["default", "default", "linear"]), "rope_theta": rng.choice([1e4, 1e5, 1e6])}
    if p["rope_type"] == "linear":
        p["factor"] = rng.choice([2.0, 4.0])
    if partial is not None:
        p["partial_rotary_factor"] = partial
    return p


def _ids(c: dict, seq_key="seq", batch_key="batch", low=0) -> torch.Tensor:
    return torch.randint(low, c["vocab"], (c[batch_key], c[seq_key]))


def _padding_mask(c: dict, seq_key="seq") -> torch.Tensor:
    """All ones, or the last `c['pad']` positions of the last sequence masked (a padded batch)."""
    mask = torch.ones(c["batch"], c[seq_key], dtype=torch.long)
    if c.get("pad"):
        mask[-1, c[seq_key] - min(c["pad"], c[seq_key] - 1):] = 0
    return mask


def _images(c: dict) -> torch.Tensor:
    return torch.randn(c["batch"], 3, c["image"], c["image"])


# ---- decoders ------------------------------------------------------------------------------------------

def _gpt2(rng):
    h, d, _ = _heads(rng)
    return {**_common(rng), **_tokens(rng), "hidden": h * d, "heads": h,
            "inner": rng.choice([None, rng.randint(h * d, 4 * h * d)]),
            "act": rng.choice(["gelu_new", "gelu", "relu", "silu", "gelu_pytorch_tanh"]),
            "scale_attn_by_inverse_layer_idx": rng.random() < 0.3, "reorder_and_upcast_attn": rng.random() < 0.3,
            "positions": "learned"}


def _build_gpt2(c):
    tf = _transformers()
    cfg = tf.GPT2Config(vocab_size=c["vocab"], n_positions=max(32, c["seq"]), n_embd=c["hidden"], n_layer=c["layers"],
                        n_head=c["heads"], n_inner=c["inner"], activation_function=c["act"],
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=c["eps"],
                        initializer_range=c["init_std"], tie_word_embeddings=c["tied"],
                        scale_attn_by_inverse_layer_idx=c["scale_attn_by_inverse_layer_idx"],
                        reorder_and_upcast_attn=c["reorder_and_upcast_attn"], bos_token_id=0, eos_token_id=0)
    return tf.GPT2LMHeadModel(cfg), (_ids(c),)


def _llama_like(rng, head_dim_free=True):
    h, d, kv = _heads(rng)
    # a free hidden size is still a multiple of the heads (transformers >= 5.2x validates hidden % heads even
    # with an explicit head_dim); for 1, 2, 4, 8 heads the choice, and so the draw, is what it always was
    free = [v for v in range(16, 129, 8) if v % h == 0]
    hidden = rng.choice([h * d, rng.choice(free)]) if head_dim_free else h * d
    return {**_common(rng), **_tokens(rng), "hidden": hidden, "heads": h, "kv_heads": kv, "head_dim": d,
            "inter": _inter(rng, hidden), "rope": _rope(rng), "positions": "rotary"}


def _llama(rng):
    c = _llama_like(rng)
    c.update(act=rng.choice(["silu", "gelu", "gelu_pytorch_tanh", "relu"]), attention_bias=rng.random() < 0.5,
             mlp_bias=rng.random() < 0.3)
    return c


def _build_llama(c):
    tf = _transformers()
    cfg = tf.LlamaConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["inter"],
                         num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                         num_key_value_heads=c["kv_heads"], head_dim=c["head_dim"], hidden_act=c["act"],
                         max_position_embeddings=max(64, c["seq"]), initializer_range=c["init_std"],
                         rms_norm_eps=c["eps"], tie_word_embeddings=c["tied"], rope_parameters=c["rope"],
                         attention_bias=c["attention_bias"], mlp_bias=c["mlp_bias"])
    return tf.LlamaForCausalLM(cfg), (_ids(c),)


def _qwen2(rng):
    c = _llama_like(rng, head_dim_free=False)  # Qwen2Config has no head_dim: hidden = heads * head_dim
    c.update(act=rng.choice(["silu", "gelu"]), qkv_bias=True)
    return c


def _build_qwen2(c):
    tf = _transformers()
    cfg = tf.Qwen2Config(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["inter"],
                         num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                         num_key_value_heads=c["kv_heads"], hidden_act=c["act"],
                         max_position_embeddings=max(64, c["seq"]), initializer_range=c["init_std"],
                         rms_norm_eps=c["eps"], tie_word_embeddings=c["tied"], rope_parameters=c["rope"])
    return tf.Qwen2ForCausalLM(cfg), (_ids(c),)


def _gemma2(rng):
    c = _llama_like(rng)
    c.update(act=rng.choice(["gelu_pytorch_tanh", "gelu"]), attention_bias=rng.random() < 0.3,
             attn_softcap=rng.choice([None, round(rng.uniform(0.5, 5.0), 3), round(rng.uniform(5.0, 50.0), 3)]),
             final_softcap=rng.choice([None, round(rng.uniform(0.5, 5.0), 3), round(rng.uniform(5.0, 30.0), 3)]),
             query_pre_attn_scalar=rng.choice([c["head_dim"], c["hidden"] // c["heads"] or c["head_dim"], 64]),
             sliding_window=rng.randint(2, 16), tied=rng.random() < 0.8)
    return c


def _build_gemma2(c):
    tf = _transformers()
    cfg = tf.Gemma2Config(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["inter"],
                          num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                          num_key_value_heads=c["kv_heads"], head_dim=c["head_dim"], hidden_activation=c["act"],
                          max_position_embeddings=max(64, c["seq"]), initializer_range=c["init_std"],
                          rms_norm_eps=c["eps"], tie_word_embeddings=c["tied"], rope_parameters=c["rope"],
                          attention_bias=c["attention_bias"], query_pre_attn_scalar=c["query_pre_attn_scalar"],
                          sliding_window=c["sliding_window"], attn_logit_softcapping=c["attn_softcap"],
                          final_logit_softcapping=c["final_softcap"])
    return tf.Gemma2ForCausalLM(cfg), (_ids(c),)


def _bloom(rng):
    h, d, _ = _heads(rng)
    return {**_common(rng), **_tokens(rng), "hidden": h * d, "heads": h, "positions": "alibi",
            "residual_post_layernorm": rng.random() < 0.3}


def _build_bloom(c):
    tf = _transformers()
    cfg = tf.BloomConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], n_layer=c["layers"], n_head=c["heads"],
                         layer_norm_epsilon=c["eps"], initializer_range=c["init_std"], hidden_dropout=0.0,
                         attention_dropout=0.0, tie_word_embeddings=c["tied"],
                         apply_residual_connection_post_layernorm=c["residual_post_layernorm"])
    return tf.BloomForCausalLM(cfg), (_ids(c),)


def _falcon(rng):
    h, d, kv = _heads(rng)
    arch = rng.choice(["new", "parallel", "sequential"])
    c = {**_common(rng), **_tokens(rng), "hidden": h * d, "heads": h, "arch": arch,
         "alibi": rng.random() < 0.5, "bias": rng.random() < 0.5, "ffn": rng.choice([None, _inter(rng, h * d)]),
         "act": rng.choice(["gelu", "relu", "silu"])}
    if arch == "new":  # grouped KV heads, one or two layer norms before the parallel attention and MLP
        c.update(kv_heads=kv, ln_in_parallel_attn=rng.choice([1, 2]))
    else:
        c.update(multi_query=rng.random() < 0.5)
    c["positions"] = "alibi" if c["alibi"] else "rotary"
    if not c["alibi"]:
        c["rope"] = _rope(rng)
    return c


def _build_falcon(c):
    tf = _transformers()
    new = c["arch"] == "new"
    kw = dict(num_kv_heads=c["kv_heads"], num_ln_in_parallel_attn=c["ln_in_parallel_attn"]) if new else dict(
        num_kv_heads=1 if c["multi_query"] else c["heads"], multi_query=c["multi_query"])
    if not c["alibi"]:
        kw["rope_parameters"] = c["rope"]
    cfg = tf.FalconConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], num_hidden_layers=c["layers"],
                          num_attention_heads=c["heads"], layer_norm_epsilon=c["eps"],
                          initializer_range=c["init_std"], hidden_dropout=0.0, attention_dropout=0.0,
                          alibi=c["alibi"], new_decoder_architecture=new, parallel_attn=c["arch"] != "sequential",
                          bias=c["bias"], max_position_embeddings=max(64, c["seq"]), ffn_hidden_size=c["ffn"],
                          activation=c["act"], tie_word_embeddings=c["tied"], **kw)
    return tf.FalconForCausalLM(cfg), (_ids(c),)


def _gpt_neox(rng):
    h, d, _ = _heads(rng, head_dims=(8, 16, 32))
    return {**_common(rng), **_tokens(rng), "hidden": h * d, "heads": h, "inter": _inter(rng, h * d),
            "act": rng.choice(["gelu", "gelu_new", "relu", "silu"]), "parallel_residual": rng.random() < 0.5,
            "attention_bias": rng.random() < 0.7, "positions": "rotary (partial)",
            "rope": _rope(rng, partial=rng.choice([0.25, 0.5, 1.0]))}


def _build_gpt_neox(c):
    tf = _transformers()
    cfg = tf.GPTNeoXConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], num_hidden_layers=c["layers"],
                           num_attention_heads=c["heads"], intermediate_size=c["inter"], hidden_act=c["act"],
                           attention_dropout=0.0, hidden_dropout=0.0, max_position_embeddings=max(64, c["seq"]),
                           initializer_range=c["init_std"], layer_norm_eps=c["eps"], tie_word_embeddings=c["tied"],
                           use_parallel_residual=c["parallel_residual"], rope_parameters=c["rope"],
                           attention_bias=c["attention_bias"])
    return tf.GPTNeoXForCausalLM(cfg), (_ids(c),)


def _phi(rng):
    h, d, kv = _heads(rng)
    return {**_common(rng), **_tokens(rng), "hidden": h * d, "heads": h, "kv_heads": kv, "head_dim": d,
            "inter": _inter(rng, h * d), "act": rng.choice(["gelu_new", "gelu", "relu"]),
            "qk_layernorm": rng.random() < 0.5, "positions": "rotary (partial)",
            "rope": _rope(rng, partial=rng.choice([0.25, 0.5, 1.0]))}


def _build_phi(c):
    tf = _transformers()
    cfg = tf.PhiConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["inter"],
                       num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                       num_key_value_heads=c["kv_heads"], resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0,
                       hidden_act=c["act"], max_position_embeddings=max(64, c["seq"]),
                       initializer_range=c["init_std"], layer_norm_eps=c["eps"], tie_word_embeddings=c["tied"],
                       rope_parameters=c["rope"], qk_layernorm=c["qk_layernorm"])
    return tf.PhiForCausalLM(cfg), (_ids(c),)


# ---- encoders ------------------------------------------------------------------------------------------

def _encoder(rng):
    h, d, _ = _heads(rng)
    c = {**_common(rng), **_tokens(rng), "hidden": h * d, "heads": h, "inter": _inter(rng, h * d),
         "act": rng.choice(["gelu", "relu", "gelu_new", "silu"]), "positions": "learned",
         "type_vocab": rng.choice([1, 2])}
    c["pad"] = rng.choice([0, rng.randint(1, max(1, c["seq"] // 2))])
    return c


def _build_bert(c):
    tf = _transformers()
    cfg = tf.BertConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], num_hidden_layers=c["layers"],
                        num_attention_heads=c["heads"], intermediate_size=c["inter"], hidden_act=c["act"],
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        max_position_embeddings=max(64, c["seq"]), type_vocab_size=c["type_vocab"],
                        initializer_range=c["init_std"], layer_norm_eps=c["eps"], tie_word_embeddings=c["tied"])
    return tf.BertForMaskedLM(cfg), (_ids(c), _padding_mask(c)), ("input_ids", "attention_mask")


def _roberta(rng):
    c = _encoder(rng)
    c["norm"] = rng.choice(["post", "pre"])  # RoBERTa, or RoBERTa-PreLayerNorm
    return c


def _build_roberta(c):
    tf = _transformers()
    cls, lm = ((tf.RobertaConfig, tf.RobertaForMaskedLM) if c["norm"] == "post"
               else (tf.RobertaPreLayerNormConfig, tf.RobertaPreLayerNormForMaskedLM))
    cfg = cls(vocab_size=c["vocab"], hidden_size=c["hidden"], num_hidden_layers=c["layers"],
              num_attention_heads=c["heads"], intermediate_size=c["inter"], hidden_act=c["act"],
              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
              max_position_embeddings=max(64, c["seq"] + 2), type_vocab_size=c["type_vocab"],
              initializer_range=c["init_std"], layer_norm_eps=c["eps"], tie_word_embeddings=c["tied"],
              pad_token_id=1)
    ids = _ids(c, low=2)  # position ids count non-pad tokens (pad id 1)
    mask = _padding_mask(c)
    ids = torch.where(mask.bool(), ids, torch.ones_like(ids))
    return lm(cfg), (ids, mask), ("input_ids", "attention_mask")


# ---- encoder-decoders ----------------------------------------------------------------------------------

def _encdec(rng):
    h, d, _ = _heads(rng)
    c = {**_common(rng), **_tokens(rng), "hidden": h * d, "heads": h, "head_dim": d, "ffn": _inter(rng, h * d),
         "decoder_layers": rng.randint(1, 3), "decoder_seq": rng.randint(2, 16)}
    c["pad"] = rng.choice([0, rng.randint(1, max(1, c["seq"] // 2))])
    return c


def _t5(rng):
    c = _encdec(rng)
    buckets = rng.choice([8, 16, 32])
    c.update(ffn_proj=rng.choice(["relu", "gated-gelu", "gated-silu"]), buckets=buckets,
             # above the exact buckets (num_buckets / 2), or the log-spaced bucket index divides by log(1)
             max_distance=rng.choice([d for d in (16, 32, 64, 128) if d > buckets]), positions="relative (bucketed)",
             kv_dim=rng.choice([c["head_dim"], 8, 16]))
    return c


def _build_t5(c):
    tf = _transformers()
    cfg = tf.T5Config(vocab_size=c["vocab"], d_model=c["hidden"], d_kv=c["kv_dim"], d_ff=c["ffn"],
                      num_layers=c["layers"], num_decoder_layers=c["decoder_layers"], num_heads=c["heads"],
                      relative_attention_num_buckets=c["buckets"], relative_attention_max_distance=c["max_distance"],
                      dropout_rate=0.0, layer_norm_epsilon=c["eps"], initializer_factor=c["init_std"] / 0.02,
                      feed_forward_proj=c["ffn_proj"], tie_word_embeddings=c["tied"], decoder_start_token_id=0)
    dec = _ids(c, seq_key="decoder_seq")
    return (tf.T5ForConditionalGeneration(cfg), (_ids(c), _padding_mask(c), dec),
            ("input_ids", "attention_mask", "decoder_input_ids"))


def _bart(rng):
    c = _encdec(rng)
    c.update(norm=rng.choice(["post", "pre"]),  # BART, or mBART (pre-norm, final layer norms)
             act=rng.choice(["gelu", "relu", "silu", "gelu_new"]), scale_embedding=rng.random() < 0.5,
             positions="learned")
    return c


def _build_bart(c):
    tf = _transformers()
    cls, lm = ((tf.BartConfig, tf.BartForConditionalGeneration) if c["norm"] == "post"
               else (tf.MBartConfig, tf.MBartForConditionalGeneration))
    cfg = cls(vocab_size=c["vocab"], max_position_embeddings=max(64, c["seq"], c["decoder_seq"]),
              encoder_layers=c["layers"], encoder_ffn_dim=c["ffn"], encoder_attention_heads=c["heads"],
              decoder_layers=c["decoder_layers"], decoder_ffn_dim=c["ffn"], decoder_attention_heads=c["heads"],
              encoder_layerdrop=0.0, decoder_layerdrop=0.0, activation_function=c["act"], d_model=c["hidden"],
              dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, init_std=c["init_std"],
              scale_embedding=c["scale_embedding"], tie_word_embeddings=c["tied"])
    return (lm(cfg), (_ids(c, low=3), _padding_mask(c), _ids(c, seq_key="decoder_seq", low=3)),
            ("input_ids", "attention_mask", "decoder_input_ids"))


# ---- mixtures of experts -------------------------------------------------------------------------------

_EXPERTS = ("grouped_mm", "batched_mm", "eager")  # transformers' experts implementations (grouped_mm: default)


def _moe(rng, head_dim_free: bool) -> dict:
    """Sizes multiples of 8: grouped_mm needs 16-byte aligned strides."""
    c = _llama_like(rng, head_dim_free)
    c["hidden"] = -(-c["hidden"] // 8) * 8
    c.update(inter=8 * rng.randint(1, c["hidden"] // 2), act=rng.choice(["silu", "gelu"]),
             experts_implementation=rng.choice(_EXPERTS))
    return c


def _with_experts(cfg, c: dict):
    cfg._experts_implementation = c["experts_implementation"]
    return cfg


def _mixtral(rng):
    c = _moe(rng, head_dim_free=True)
    experts = rng.choice([2, 4, 8])
    c.update(experts=experts, top_k=rng.randint(1, min(experts, 3)),
             sliding_window=rng.choice([None, rng.randint(2, 16)]))
    return c


def _build_mixtral(c):
    tf = _transformers()
    cfg = tf.MixtralConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["inter"],
                           num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                           num_key_value_heads=c["kv_heads"], head_dim=c["head_dim"], hidden_act=c["act"],
                           max_position_embeddings=max(64, c["seq"]), initializer_range=c["init_std"],
                           rms_norm_eps=c["eps"], tie_word_embeddings=c["tied"], sliding_window=c["sliding_window"],
                           attention_dropout=0.0, num_experts_per_tok=c["top_k"], num_local_experts=c["experts"],
                           router_jitter_noise=0.0, rope_parameters=c["rope"])
    return tf.MixtralForCausalLM(_with_experts(cfg, c)), (_ids(c),)


def _qwen2_moe(rng):
    c = _moe(rng, head_dim_free=False)
    experts = rng.choice([4, 6, 8])
    layers = c["layers"]
    c.update(experts=experts, top_k=rng.randint(1, 4),
             moe_inter=8 * rng.randint(1, c["hidden"] // 4), shared_inter=8 * rng.randint(1, c["hidden"] // 4),
             norm_topk_prob=rng.random() < 0.5, sparse_step=rng.choice([1, 1, 2]),
             mlp_only_layers=sorted(rng.sample(range(layers), rng.randint(0, layers - 1))) if layers > 1 else [],
             qkv_bias=rng.random() < 0.7)
    return c


def _build_qwen2_moe(c):
    tf = _transformers()
    cfg = tf.Qwen2MoeConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["inter"],
                            num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                            num_key_value_heads=c["kv_heads"], hidden_act=c["act"],
                            max_position_embeddings=max(64, c["seq"]), initializer_range=c["init_std"],
                            rms_norm_eps=c["eps"], tie_word_embeddings=c["tied"], rope_parameters=c["rope"],
                            attention_dropout=0.0, decoder_sparse_step=c["sparse_step"],
                            moe_intermediate_size=c["moe_inter"], shared_expert_intermediate_size=c["shared_inter"],
                            num_experts_per_tok=c["top_k"], num_experts=c["experts"],
                            norm_topk_prob=c["norm_topk_prob"], mlp_only_layers=c["mlp_only_layers"],
                            qkv_bias=c["qkv_bias"])
    return tf.Qwen2MoeForCausalLM(_with_experts(cfg, c)), (_ids(c),)


# ---- conv nets (depthwise convs, batch norm) -----------------------------------------------------------

def _vision(rng, sizes=(16, 24, 32, 40)) -> dict:
    return {"batch": rng.randint(1, 3), "image": rng.choice(sizes), "labels": rng.randint(2, 20)}


def _mobilenet_v2(rng):
    return {**_vision(rng, (16, 24, 32, 40)), "depth_multiplier": rng.choice([0.25, 0.35, 0.5]),
            "expand_ratio": rng.choice([2.0, 4.0, 6.0]), "act": rng.choice(["relu6", "relu6", "relu", "silu"]),
            "output_stride": rng.choice([32, 32, 16, 8]), "first_layer_is_expansion": rng.random() < 0.7,
            "finegrained_output": rng.random() < 0.5, "tf_padding": rng.random() < 0.5,
            "init_std": rng.choice([0.02, 0.1])}


def _build_mobilenet_v2(c):
    tf = _transformers()
    cfg = tf.MobileNetV2Config(num_channels=3, image_size=c["image"], depth_multiplier=c["depth_multiplier"],
                               expand_ratio=c["expand_ratio"], output_stride=c["output_stride"],
                               first_layer_is_expansion=c["first_layer_is_expansion"],
                               finegrained_output=c["finegrained_output"], hidden_act=c["act"],
                               tf_padding=c["tf_padding"], classifier_dropout_prob=0.0,
                               initializer_range=c["init_std"], num_labels=c["labels"])
    return tf.MobileNetV2ForImageClassification(cfg), (_images(c),), ("pixel_values",)


def _convnext(rng):
    stages = rng.randint(2, 4)
    width = rng.choice([8, 12, 16])
    c = {**_vision(rng, (16, 24, 32)), "patch_size": rng.choice([2, 4]),
         "hidden_sizes": [width * 2 ** i for i in range(stages)],
         "depths": [rng.randint(1, 2) for _ in range(stages)],
         "act": rng.choice(["gelu", "relu", "silu"]), "layer_scale": rng.choice([0.0, 1e-6, 0.1, 1.0]),
         "eps": rng.choice([1e-6, 1e-12]), "init_std": rng.choice([0.02, 0.1])}
    # every stage after the first halves the patch grid (a 2x2 stride-2 conv): keep the stages the grid holds
    # (drawn first and cut after, so every draw that was valid keeps its config)
    fits = (c["image"] // c["patch_size"]).bit_length()
    c["hidden_sizes"], c["depths"] = c["hidden_sizes"][:fits], c["depths"][:fits]
    return c


def _build_convnext(c):
    tf = _transformers()
    cfg = tf.ConvNextConfig(num_channels=3, patch_size=c["patch_size"], num_stages=len(c["hidden_sizes"]),
                            hidden_sizes=c["hidden_sizes"], depths=c["depths"], hidden_act=c["act"],
                            initializer_range=c["init_std"], layer_norm_eps=c["eps"],
                            layer_scale_init_value=c["layer_scale"], drop_path_rate=0.0, image_size=c["image"],
                            num_labels=c["labels"])
    return tf.ConvNextForImageClassification(cfg), (_images(c),), ("pixel_values",)


def _resnet(rng):
    stages = rng.randint(2, 3)
    width = rng.choice([8, 16])
    return {**_vision(rng), "embedding_size": rng.choice([8, 16, 24]),
            "layer_type": rng.choice(["basic", "bottleneck"]),
            "hidden_sizes": [width * 2 ** i * rng.choice([1, 2]) for i in range(stages)],
            "depths": [rng.randint(1, 2) for _ in range(stages)], "act": rng.choice(["relu", "relu", "gelu", "silu"]),
            "downsample_in_first_stage": rng.random() < 0.5, "downsample_in_bottleneck": rng.random() < 0.5}


def _build_resnet(c):
    tf = _transformers()
    cfg = tf.ResNetConfig(num_channels=3, embedding_size=c["embedding_size"], hidden_sizes=c["hidden_sizes"],
                          depths=c["depths"], layer_type=c["layer_type"], hidden_act=c["act"],
                          downsample_in_first_stage=c["downsample_in_first_stage"],
                          downsample_in_bottleneck=c["downsample_in_bottleneck"], num_labels=c["labels"])
    return tf.ResNetForImageClassification(cfg), (_images(c),), ("pixel_values",)


# ---- vision transformers -------------------------------------------------------------------------------

def _vit(rng):
    h, d, _ = _heads(rng, heads=(1, 2, 4, 6))
    patch = rng.choice([4, 8])
    return {"batch": rng.randint(1, 3), "image": patch * rng.randint(2, 5), "patch_size": patch,
            "labels": rng.randint(2, 20), "layers": rng.randint(1, 3), "hidden": h * d, "heads": h,
            "inter": _inter(rng, h * d), "act": rng.choice(["gelu", "relu", "gelu_new", "silu"]),
            "qkv_bias": rng.random() < 0.7, "eps": rng.choice([1e-6, 1e-12]), "init_std": rng.choice([0.02, 0.1]),
            "variant": rng.choice(["vit", "deit"]), "positions": "learned"}


def _build_vit(c):
    tf = _transformers()
    cls, head = ((tf.ViTConfig, tf.ViTForImageClassification) if c["variant"] == "vit"
                 else (tf.DeiTConfig, tf.DeiTForImageClassificationWithTeacher))
    cfg = cls(hidden_size=c["hidden"], num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
              intermediate_size=c["inter"], hidden_act=c["act"], hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0, initializer_range=c["init_std"], layer_norm_eps=c["eps"],
              image_size=c["image"], patch_size=c["patch_size"], num_channels=3, qkv_bias=c["qkv_bias"],
              num_labels=c["labels"])
    return head(cfg), (_images(c),), ("pixel_values",)


def _swin(rng):
    stages = rng.randint(2, 3)
    heads = [rng.choice([1, 2])]
    for _ in range(stages - 1):
        heads.append(heads[-1] * rng.choice([1, 2]))
    head_dim = rng.choice([8, 16])
    patch = rng.choice([2, 4])
    window = rng.choice([2, 3, 4])
    # the last stage holds the window or one row/column more (a padded window); a stage smaller than the
    # window fails in transformers' Swin (its shifted-window mask is built for the configured window)
    side = 2 ** (stages - 1) * rng.choice([window, window + 1])
    return {"batch": rng.randint(1, 3), "patch_size": patch, "image": patch * side, "window_size": window,
            "labels": rng.randint(2, 20), "embed_dim": heads[0] * head_dim,
            "depths": [rng.randint(1, 2) for _ in heads],
            "num_heads": heads, "mlp_ratio": rng.choice([1.0, 2.0, 4.0]),
            "qkv_bias": rng.random() < 0.7, "act": rng.choice(["gelu", "relu", "silu"]),
            "absolute_positions": rng.random() < 0.5, "eps": rng.choice([1e-5, 1e-6]),
            "init_std": rng.choice([0.02, 0.1]), "positions": "relative bias"}


def _build_swin(c):
    tf = _transformers()
    cfg = tf.SwinConfig(image_size=c["image"], patch_size=c["patch_size"], num_channels=3, embed_dim=c["embed_dim"],
                        depths=c["depths"], num_heads=c["num_heads"], window_size=c["window_size"],
                        mlp_ratio=c["mlp_ratio"], qkv_bias=c["qkv_bias"], hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, drop_path_rate=0.0, hidden_act=c["act"],
                        use_absolute_embeddings=c["absolute_positions"], initializer_range=c["init_std"],
                        layer_norm_eps=c["eps"], num_labels=c["labels"])
    return tf.SwinForImageClassification(cfg), (_images(c),), ("pixel_values",)


# ---- state-space models --------------------------------------------------------------------------------

def _mamba(rng):
    hidden = rng.choice([16, 24, 32, 48, 64])
    return {**_tokens(rng, seq=(3, 16)), "layers": rng.randint(1, 3), "hidden": hidden,
            "state_size": rng.choice([4, 8, 16]), "expand": rng.choice([1, 2]), "conv_kernel": rng.choice([2, 3, 4]),
            "use_bias": rng.random() < 0.3, "use_conv_bias": rng.random() < 0.7,
            "time_step_rank": rng.choice(["auto", rng.randint(2, 8)]), "residual_in_fp32": rng.random() < 0.5,
            "act": rng.choice(["silu", "silu", "gelu"]), "tied": rng.random() < 0.5, "eps": rng.choice([1e-5, 1e-6]),
            "init_std": rng.choice([0.02, 0.1]), "positions": "none (recurrent scan)"}


def _build_mamba(c):
    tf = _transformers()
    cfg = tf.MambaConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], state_size=c["state_size"],
                         num_hidden_layers=c["layers"], layer_norm_epsilon=c["eps"], expand=c["expand"],
                         conv_kernel=c["conv_kernel"], use_bias=c["use_bias"], use_conv_bias=c["use_conv_bias"],
                         hidden_act=c["act"], initializer_range=c["init_std"], residual_in_fp32=c["residual_in_fp32"],
                         time_step_rank=c["time_step_rank"], use_mambapy=False, use_associative_scan=False,
                         tie_word_embeddings=c["tied"])
    return tf.MambaForCausalLM(cfg), (_ids(c),)


def _mamba2(rng):
    heads = rng.choice([2, 4, 8])
    head_dim = rng.choice([4, 8, 16])
    expand = rng.choice([1, 2])
    hidden = heads * head_dim // expand
    return {**_tokens(rng, seq=(3, 16)), "layers": rng.randint(1, 3), "hidden": hidden, "heads": heads,
            "head_dim": head_dim, "expand": expand, "state_size": rng.choice([4, 8, 16]),
            "groups": rng.choice([g for g in (1, 2, 4) if heads % g == 0]), "conv_kernel": rng.choice([2, 3, 4]),
            "chunk_size": rng.choice([2, 4, 8, 256]), "use_bias": rng.random() < 0.3,
            "use_conv_bias": rng.random() < 0.7, "residual_in_fp32": rng.random() < 0.5,
            "tied": rng.random() < 0.5, "eps": rng.choice([1e-5, 1e-6]), "init_std": rng.choice([0.02, 0.1]),
            "positions": "none (chunked scan)"}


def _build_mamba2(c):
    tf = _transformers()
    cfg = tf.Mamba2Config(num_heads=c["heads"], head_dim=c["head_dim"], vocab_size=c["vocab"],
                          hidden_size=c["hidden"], state_size=c["state_size"], num_hidden_layers=c["layers"],
                          layer_norm_epsilon=c["eps"], expand=c["expand"], conv_kernel=c["conv_kernel"],
                          n_groups=c["groups"], use_bias=c["use_bias"], use_conv_bias=c["use_conv_bias"],
                          initializer_range=c["init_std"], residual_in_fp32=c["residual_in_fp32"],
                          chunk_size=c["chunk_size"], tie_word_embeddings=c["tied"])
    return tf.Mamba2ForCausalLM(cfg), (_ids(c),)


# ---- families the stability grid was never tuned on (weight sharing, disentangled attention, audio, FFT) ----

def _albert(rng):
    """ALBERT: one encoder layer's weights shared by every layer (its gradients sum over the layers), and a
    factorised embedding (a small embedding projected up to the hidden size)."""
    c = _encoder(rng)
    c.update(layers=rng.randint(2, 3), embedding_size=rng.choice([8, 16, 32, c["hidden"]]),
             act=rng.choice(["gelu_new", "gelu", "relu", "silu"]), shared="one layer, all layers")
    return c


def _build_albert(c):
    tf = _transformers()
    cfg = tf.AlbertConfig(vocab_size=c["vocab"], embedding_size=c["embedding_size"], hidden_size=c["hidden"],
                          num_hidden_layers=c["layers"], num_hidden_groups=1, inner_group_num=1,
                          num_attention_heads=c["heads"], intermediate_size=c["inter"], hidden_act=c["act"],
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
                          max_position_embeddings=max(64, c["seq"]), type_vocab_size=c["type_vocab"],
                          initializer_range=c["init_std"], layer_norm_eps=c["eps"], tie_word_embeddings=c["tied"])
    return tf.AlbertForMaskedLM(cfg), (_ids(c, low=4), _padding_mask(c)), ("input_ids", "attention_mask")


def _deberta_v2(rng):
    """DeBERTa-v2: disentangled attention (content-to-position and position-to-content scores from shared
    relative embeddings, log-bucketed positions), optional absolute positions and a conv layer."""
    c = _encoder(rng)
    c.update(pos_att_type=rng.choice([["p2c", "c2p"], ["c2p"], ["p2c"]]),
             max_relative_positions=rng.choice([-1, rng.randint(4, 32)]),
             position_buckets=rng.choice([-1, 8, 16, 32]), norm_rel_ebd=rng.choice(["layer_norm", "none"]),
             share_att_key=rng.random() < 0.6, position_biased_input=rng.random() < 0.3,
             conv_kernel_size=rng.choice([0, 0, 3]), positions="relative (disentangled)")
    return c


def _build_deberta_v2(c):
    tf = _transformers()
    cfg = tf.DebertaV2Config(vocab_size=c["vocab"], hidden_size=c["hidden"], num_hidden_layers=c["layers"],
                             num_attention_heads=c["heads"], intermediate_size=c["inter"], hidden_act=c["act"],
                             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                             max_position_embeddings=max(64, c["seq"]), type_vocab_size=c["type_vocab"],
                             initializer_range=c["init_std"], layer_norm_eps=c["eps"], relative_attention=True,
                             max_relative_positions=c["max_relative_positions"], pos_att_type=c["pos_att_type"],
                             position_biased_input=c["position_biased_input"], pad_token_id=0,
                             tie_word_embeddings=c["tied"], position_buckets=c["position_buckets"],
                             norm_rel_ebd=c["norm_rel_ebd"], share_att_key=c["share_att_key"],
                             conv_kernel_size=c["conv_kernel_size"], conv_act=c["act"])
    return tf.DebertaV2ForMaskedLM(cfg), (_ids(c, low=1), _padding_mask(c)), ("input_ids", "attention_mask")


def _fnet(rng):
    """FNet: no attention; tokens mixed by the real part of a 2-D FFT over (sequence, hidden)."""
    hidden = rng.choice(range(16, 129, 8))
    return {**_common(rng), **_tokens(rng), "hidden": hidden, "inter": _inter(rng, hidden),
            "act": rng.choice(["gelu_new", "gelu", "relu", "silu"]), "type_vocab": rng.choice([1, 2, 4]),
            "positions": "learned", "mixing": "fft2 (real part)"}


def _build_fnet(c):
    tf = _transformers()
    cfg = tf.FNetConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], num_hidden_layers=c["layers"],
                        intermediate_size=c["inter"], hidden_act=c["act"], hidden_dropout_prob=0.0,
                        max_position_embeddings=max(64, c["seq"]), type_vocab_size=c["type_vocab"],
                        initializer_range=c["init_std"], layer_norm_eps=c["eps"],
                        use_tpu_fourier_optimizations=False, tie_word_embeddings=c["tied"], pad_token_id=0)
    return tf.FNetForMaskedLM(cfg), (_ids(c),)


def _opt(rng):
    """OPT: learned positions offset by 2 and counted from the attention mask, pre- or post-norm, an
    optional projection between a narrower embedding and the hidden size."""
    h, d, _ = _heads(rng)
    c = {**_common(rng), **_tokens(rng), "hidden": h * d, "heads": h, "ffn": _inter(rng, h * d),
         "act": rng.choice(["relu", "gelu", "gelu_new", "silu"]), "norm_before": rng.random() < 0.7,
         "embed_proj": rng.choice([None, 8, 16]), "bias": rng.random() < 0.8,
         "ln_affine": rng.random() < 0.8, "positions": "learned (from the mask)"}
    c["pad"] = rng.choice([0, rng.randint(1, max(1, c["seq"] // 2))])
    return c


def _build_opt(c):
    tf = _transformers()
    cfg = tf.OPTConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], num_hidden_layers=c["layers"],
                       ffn_dim=c["ffn"], max_position_embeddings=max(64, c["seq"]),
                       do_layer_norm_before=c["norm_before"], word_embed_proj_dim=c["embed_proj"] or c["hidden"],
                       dropout=0.0, attention_dropout=0.0, num_attention_heads=c["heads"],
                       activation_function=c["act"], layerdrop=0.0, init_std=c["init_std"], pad_token_id=1,
                       bos_token_id=2, eos_token_id=2, enable_bias=c["bias"],
                       layer_norm_elementwise_affine=c["ln_affine"], tie_word_embeddings=c["tied"])
    return tf.OPTForCausalLM(cfg), (_ids(c, low=3), _padding_mask(c)), ("input_ids", "attention_mask")


def _gptj(rng):
    """GPT-J: attention and MLP in parallel off one layer norm, rotary on a part of each head (interleaved
    pairs), no attention biases."""
    h, d, _ = _heads(rng)
    return {**_common(rng), **_tokens(rng), "hidden": h * d, "heads": h, "head_dim": d,
            "rotary_dim": rng.choice([d // 4, d // 2, d]), "inner": rng.choice([None, _inter(rng, h * d)]),
            "act": rng.choice(["gelu_new", "gelu", "relu", "silu"]), "positions": "rotary (partial, interleaved)"}


def _build_gptj(c):
    tf = _transformers()
    cfg = tf.GPTJConfig(vocab_size=c["vocab"], n_positions=max(64, c["seq"]), n_embd=c["hidden"],
                        n_layer=c["layers"], n_head=c["heads"], rotary_dim=c["rotary_dim"], n_inner=c["inner"],
                        activation_function=c["act"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        layer_norm_epsilon=c["eps"], initializer_range=c["init_std"],
                        tie_word_embeddings=c["tied"], bos_token_id=0, eos_token_id=0)
    return tf.GPTJForCausalLM(cfg), (_ids(c),)


def _mistral(rng):
    """Mistral: Llama-like with GQA and a sliding attention window shorter than the sequence."""
    c = _llama_like(rng)
    c["seq"] = rng.randint(6, 24)
    c.update(act=rng.choice(["silu", "gelu"]), sliding_window=rng.randint(2, c["seq"] - 1),
             positions="rotary")
    return c


def _build_mistral(c):
    tf = _transformers()
    cfg = tf.MistralConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["inter"],
                           num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                           num_key_value_heads=c["kv_heads"], head_dim=c["head_dim"], hidden_act=c["act"],
                           max_position_embeddings=max(64, c["seq"]), initializer_range=c["init_std"],
                           rms_norm_eps=c["eps"], tie_word_embeddings=c["tied"], rope_parameters=c["rope"],
                           sliding_window=c["sliding_window"], attention_dropout=0.0)
    return tf.MistralForCausalLM(cfg), (_ids(c),)


def _whisper(rng):
    """Whisper: two 1-D convs (the second stride 2) with GELU over mel features, sinusoidal encoder
    positions, then an encoder-decoder with learned decoder positions."""
    h, d, _ = _heads(rng)
    return {**_common(rng), "batch": rng.randint(1, 3), "vocab": rng.randint(40, 300), "hidden": h * d,
            "heads": h, "ffn": _inter(rng, h * d), "decoder_layers": rng.randint(1, 3),
            "mel_bins": rng.choice([8, 16, 20, 32]), "source_positions": rng.randint(3, 12),
            "decoder_seq": rng.randint(2, 12), "act": rng.choice(["gelu", "relu", "gelu_new", "silu"]),
            "scale_embedding": rng.random() < 0.5, "positions": "sinusoidal (encoder), learned (decoder)"}


def _build_whisper(c):
    tf = _transformers()
    cfg = tf.WhisperConfig(vocab_size=c["vocab"], num_mel_bins=c["mel_bins"], encoder_layers=c["layers"],
                           encoder_attention_heads=c["heads"], decoder_layers=c["decoder_layers"],
                           decoder_attention_heads=c["heads"], decoder_ffn_dim=c["ffn"], encoder_ffn_dim=c["ffn"],
                           encoder_layerdrop=0.0, decoder_layerdrop=0.0, activation_function=c["act"],
                           d_model=c["hidden"], dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                           init_std=c["init_std"], scale_embedding=c["scale_embedding"],
                           max_source_positions=c["source_positions"], max_target_positions=max(32, c["decoder_seq"]),
                           pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0,
                           suppress_tokens=None, begin_suppress_tokens=None, apply_spec_augment=False,
                           tie_word_embeddings=c["tied"])
    features = torch.randn(c["batch"], c["mel_bins"], 2 * c["source_positions"])  # the length Whisper demands
    return (tf.WhisperForConditionalGeneration(cfg), (features, _ids(c, seq_key="decoder_seq")),
            ("input_features", "decoder_input_ids"))


def _wav2vec2(rng):
    """Wav2Vec2: a strided 1-D conv feature extractor on raw samples (group norm on its first conv, or layer
    norm on every conv), a grouped conv as relative position embedding (weight-normed), a transformer, CTC."""
    h, d, _ = _heads(rng)
    convs = rng.randint(2, 3)
    dims = [rng.choice([8, 16, 32]) for _ in range(convs)]
    kernels = [rng.choice([2, 3, 4, 5]) for _ in range(convs)]
    strides = [rng.choice([1, 2, 3]) for _ in range(convs)]
    frames = rng.randint(3, 16)
    samples = frames
    for k, s in zip(reversed(kernels), reversed(strides)):
        samples = (samples - 1) * s + k
    norm = rng.choice(["group", "layer"])
    return {"batch": rng.randint(1, 3), "layers": rng.randint(1, 3), "hidden": h * d, "heads": h,
            "inter": _inter(rng, h * d), "act": rng.choice(["gelu", "relu", "gelu_new", "silu"]),
            "conv_dim": dims, "conv_kernel": kernels, "conv_stride": strides, "conv_bias": rng.random() < 0.5,
            "feat_extract_norm": norm, "feat_extract_act": rng.choice(["gelu", "relu", "silu"]),
            "stable_layer_norm": norm == "layer" and rng.random() < 0.7,
            "pos_conv_kernel": rng.choice([2, 3, 4, 8]),
            "pos_conv_groups": rng.choice([g for g in (1, 2, 4, 8) if (h * d) % g == 0]),
            "frames": frames, "samples": samples + rng.randint(0, strides[0] - 1), "vocab": rng.randint(8, 40),
            "eps": rng.choice([1e-5, 1e-6]), "init_std": rng.choice([0.02, 0.1]),
            "positions": "convolutional (grouped, weight norm)"}


def _build_wav2vec2(c):
    tf = _transformers()
    cfg = tf.Wav2Vec2Config(vocab_size=c["vocab"], hidden_size=c["hidden"], num_hidden_layers=c["layers"],
                            num_attention_heads=c["heads"], intermediate_size=c["inter"], hidden_act=c["act"],
                            hidden_dropout=0.0, activation_dropout=0.0, attention_dropout=0.0, feat_proj_dropout=0.0,
                            final_dropout=0.0, layerdrop=0.0, initializer_range=c["init_std"],
                            layer_norm_eps=c["eps"], feat_extract_norm=c["feat_extract_norm"],
                            feat_extract_activation=c["feat_extract_act"], conv_dim=c["conv_dim"],
                            conv_stride=c["conv_stride"], conv_kernel=c["conv_kernel"], conv_bias=c["conv_bias"],
                            num_conv_pos_embeddings=c["pos_conv_kernel"],
                            num_conv_pos_embedding_groups=c["pos_conv_groups"],
                            do_stable_layer_norm=c["stable_layer_norm"], apply_spec_augment=False,
                            mask_time_prob=0.0, mask_feature_prob=0.0, pad_token_id=0)
    return tf.Wav2Vec2ForCTC(cfg), (torch.randn(c["batch"], c["samples"]),), ("input_values",)


def _convnextv2(rng):
    """ConvNeXt V2: ConvNeXt blocks with global response normalisation (an L2 norm over the spatial grid,
    divided by its channel mean) in place of layer scale."""
    c = _convnext(rng)
    del c["layer_scale"]
    c["grn"] = True
    return c


def _build_convnextv2(c):
    tf = _transformers()
    cfg = tf.ConvNextV2Config(num_channels=3, patch_size=c["patch_size"], num_stages=len(c["hidden_sizes"]),
                              hidden_sizes=c["hidden_sizes"], depths=c["depths"], hidden_act=c["act"],
                              initializer_range=c["init_std"], layer_norm_eps=c["eps"], drop_path_rate=0.0,
                              image_size=c["image"], num_labels=c["labels"])
    return tf.ConvNextV2ForImageClassification(cfg), (_images(c),), ("pixel_values",)


# ---- timm (only where it imports: not on CPU torch here, whose torchvision does not load) ---------------

def _timm_mobilenetv3(rng):
    return {**_vision(rng, (16, 24, 32)),
            "arch": rng.choice(["mobilenetv3_small_050", "mobilenetv3_small_075", "mobilenetv3_small_100",
                                "lcnet_035", "lcnet_050", "lcnet_075", "tinynet_e"]),
            "pad_type": rng.choice(["", "same"]), "global_pool": rng.choice(["avg", "max", "avgmax"])}


def _build_timm_mobilenetv3(c):
    """Depthwise-separable blocks, squeeze-excite, hard-swish (MobileNetV3, LCNet) or swish (TinyNet)."""
    import timm
    model = timm.create_model(c["arch"], pretrained=False, num_classes=c["labels"], drop_rate=0.0,
                              drop_path_rate=0.0, pad_type=c["pad_type"], global_pool=c["global_pool"])
    return model, (_images(c),), None


def _timm_vit(rng):
    h, d, _ = _heads(rng, heads=(1, 2, 4))
    patch = rng.choice([4, 8])
    return {"batch": rng.randint(1, 3), "image": patch * rng.randint(2, 4), "patch_size": patch,
            "labels": rng.randint(2, 20), "layers": rng.randint(1, 3), "hidden": h * d, "heads": h,
            "mlp_ratio": rng.choice([1.0, 2.0, 4.0]), "qkv_bias": rng.random() < 0.7,
            "class_token": rng.random() < 0.7, "layer_scale": rng.choice([None, 1e-5, 0.1]),
            "pre_norm": rng.random() < 0.3, "qk_norm": rng.random() < 0.3, "positions": "learned"}


def _build_timm_vit(c):
    from timm.models.vision_transformer import VisionTransformer
    model = VisionTransformer(img_size=c["image"], patch_size=c["patch_size"], num_classes=c["labels"],
                              embed_dim=c["hidden"], depth=c["layers"], num_heads=c["heads"],
                              mlp_ratio=c["mlp_ratio"], qkv_bias=c["qkv_bias"], class_token=c["class_token"],
                              global_pool="token" if c["class_token"] else "avg", init_values=c["layer_scale"],
                              pre_norm=c["pre_norm"], qk_norm=c["qk_norm"], drop_rate=0.0, drop_path_rate=0.0)
    return model, (_images(c),), None


# ---- the registry --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Family:
    """A family of architectures: `sample(rng) -> config`, `build(config) -> (model, inputs[, input names])`."""

    name: str
    kind: str  # decoder / encoder / encoder-decoder / moe / conv / vision-transformer / ssm / audio
    sample: Callable[[random.Random], dict]
    build: Callable[[dict], tuple]
    needs: str = "transformers"

    def __call__(self, seed: int) -> tuple[Case, dict]:
        return draw(self.name, seed)


_ALL = [
    Family("gpt2", "decoder", _gpt2, _build_gpt2),
    Family("llama", "decoder", _llama, _build_llama),
    Family("qwen2", "decoder", _qwen2, _build_qwen2),
    Family("gemma2", "decoder", _gemma2, _build_gemma2),
    Family("bloom", "decoder", _bloom, _build_bloom),
    Family("falcon", "decoder", _falcon, _build_falcon),
    Family("gpt_neox", "decoder", _gpt_neox, _build_gpt_neox),
    Family("phi", "decoder", _phi, _build_phi),
    Family("bert", "encoder", _encoder, _build_bert),
    Family("roberta", "encoder", _roberta, _build_roberta),
    Family("t5", "encoder-decoder", _t5, _build_t5),
    Family("bart", "encoder-decoder", _bart, _build_bart),
    Family("mixtral", "moe", _mixtral, _build_mixtral),
    Family("qwen2_moe", "moe", _qwen2_moe, _build_qwen2_moe),
    Family("mobilenet_v2", "conv", _mobilenet_v2, _build_mobilenet_v2),
    Family("convnext", "conv", _convnext, _build_convnext),
    Family("resnet", "conv", _resnet, _build_resnet),
    Family("vit", "vision-transformer", _vit, _build_vit),
    Family("swin", "vision-transformer", _swin, _build_swin),
    Family("mamba", "ssm", _mamba, _build_mamba),
    Family("mamba2", "ssm", _mamba2, _build_mamba2),
    Family("albert", "encoder", _albert, _build_albert),
    Family("deberta_v2", "encoder", _deberta_v2, _build_deberta_v2),
    Family("fnet", "encoder", _fnet, _build_fnet),
    Family("opt", "decoder", _opt, _build_opt),
    Family("gptj", "decoder", _gptj, _build_gptj),
    Family("mistral", "decoder", _mistral, _build_mistral),
    Family("whisper", "encoder-decoder", _whisper, _build_whisper),
    Family("wav2vec2", "audio", _wav2vec2, _build_wav2vec2),
    Family("convnextv2", "conv", _convnextv2, _build_convnextv2),
    Family("timm_mobilenetv3", "conv", _timm_mobilenetv3, _build_timm_mobilenetv3, needs="timm"),
    Family("timm_vit", "vision-transformer", _timm_vit, _build_timm_vit, needs="timm"),
]
FAMILIES: dict[str, Family] = {f.name: f for f in _ALL}


HELD_OUT = "any:"  # `any:<model_type>`: a held-out family, from the first shrinker below that knows the type
# the held-out shrinkers (each a sibling module: types(), held_out_types(), sample(rng), build(type, config)),
# and the `kind` their draws record
HELD_OUT_KINDS = {"any_causal_lm": "held-out", "any_image_classifier": "held-out-vision",
                  "any_text_encoder": "held-out-encoder", "any_seq2seq_lm": "held-out-seq2seq"}


def _sibling(name: str):
    """A sibling module of this folder, also where this file was loaded by path (a `models/families.py:NAME`
    target); loaded under `models.NAME`, so the siblings import each other as `models.X` either way."""
    import importlib.util
    import sys
    from pathlib import Path
    if f"models.{name}" not in sys.modules:
        spec = importlib.util.spec_from_file_location(f"models.{name}", Path(__file__).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules[f"models.{name}"]


def _shrinkers():
    return [(_sibling(name), kind) for name, kind in HELD_OUT_KINDS.items()]  # in order: any_causal_lm first


def family(name: str) -> Family:
    """The registered family, or the held-out `any:<model_type>` one (any transformers causal LM, image
    classifier, text encoder (masked LM, else sequence classifier) or seq2seq LM, shrunk; a type of two kinds is
    the first shrinker's in HELD_OUT_KINDS)."""
    if name in FAMILIES:
        return FAMILIES[name]
    model_type = name.removeprefix(HELD_OUT)
    for shrinker, kind in _shrinkers() if name.startswith(HELD_OUT) else ():
        if model_type in shrinker.types():
            return Family(name, kind, shrinker.sample, lambda c, shrinker=shrinker: shrinker.build(model_type, c))
    raise KeyError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}, or any:<model type> for a transformers "
                   "causal-LM, image-classification or text-encoder (masked-LM or sequence-classification) model "
                   "type, or a seq2seq-LM one (`--families any:all` runs every one the families above do not cover)")


def held_out(kind: str | None = None) -> list[str]:
    """`any:<model_type>` for every transformers causal-LM, image-classifier, text-encoder (masked-LM, else
    sequence-classifier) and seq2seq-LM type the hand-written families do not cover (causal LMs first, then image
    classifiers, then text encoders, then seq2seq LMs, each list in name order; a type of two kinds is the first
    one's); of one kind of HELD_OUT_KINDS ("held-out", "held-out-vision", "held-out-encoder", "held-out-seq2seq")
    when given."""
    names = {}
    for shrinker, k in _shrinkers():
        for t in shrinker.held_out_types():
            names.setdefault(HELD_OUT + t, k)
    return [n for n, k in names.items() if kind in (None, k)]


def available(names=None) -> tuple[list[str], dict[str, str]]:
    """(families that can be built here, {family: why not} for the others), in registry order."""
    names = list(FAMILIES) if names is None else list(names)
    timm_why = timm_status() if any(family(n).needs == "timm" for n in names) else None
    ok, not_here = [], {}
    for n in names:
        if family(n).needs == "timm" and timm_why:
            not_here[n] = timm_why
        else:
            ok.append(n)
    return ok, not_here


def _key(name: str, seed: int) -> str:
    family(name)  # unknown names raise here
    return f"{name}/{int(seed)}"


def draw_config(name: str, seed: int) -> dict:
    """The config drawn for (family, seed); no model is built."""
    f = family(name)
    cfg = f.sample(random.Random(_key(name, seed)))
    return {"family": name, "kind": f.kind, **cfg}


def config_id(config: dict) -> str:
    """A short digest of a drawn config (a changed draw function gives new ids, so stale results are redone)."""
    return f"{zlib.crc32(json.dumps(config, sort_keys=True).encode()):08x}"


def draw(name: str, seed: int) -> tuple[Case, dict]:
    """Build the drawn tiny model and its inputs: weights, then inputs, from torch's global generator seeded
    from (family, seed). The model is in eval mode; batch norms are randomised."""
    config = draw_config(name, seed)
    torch.manual_seed(zlib.crc32(_key(name, seed).encode()))
    built = family(name).build(config)
    model, inputs = built[0], built[1]
    names = built[2] if len(built) > 2 else ("input_ids",)
    model.eval()
    randomize_batch_norms(model)
    if names is not None:  # a transformers model: keyword inputs, the logits out, no cache
        fixed = {"use_cache": False} if "use_cache" in _forward_params(model) else {}
        model = Logits(model, names, **fixed)
    return Case(model, tuple(inputs), f"{name.replace(HELD_OUT, 'any_')}_s{seed}"), config


def _forward_params(model) -> set[str]:
    import inspect
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def __getattr__(name: str):
    """`models/families.py:FAMILY_SEED` is a fusecheck target: the drawn model of one grid row (`t5_0`,
    `qwen2_moe_3`, `any_olmo2_3` for `any:olmo2`), so a row of the stability grid replays under `fusecheck check`
    or `bisect` as it ran, given the same `--seed` (the grid checks seed N's draw with seed N: it seeds the
    cotangents) and, for a grid run with `--threads 1`, OMP_NUM_THREADS=1 (CPU reductions split by thread)."""
    fam, _, seed = name.rpartition("_")
    if fam.startswith("any_"):  # a held-out draw: `any_olmo2_3` is `any:olmo2`, seed 3
        fam = HELD_OUT + fam.removeprefix("any_")
    if (fam in FAMILIES or fam.startswith(HELD_OUT)) and seed.isdigit():
        return lambda: draw(fam, int(seed))[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
