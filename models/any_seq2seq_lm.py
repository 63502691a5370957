"""Held-out encoder-decoder families: any transformers seq2seq LM, shrunk from its own default config (issue 27).

The other shrinkers reach the causal LMs (models/any_causal_lm.py), the image classifiers
(models/any_image_classifier.py) and the text encoders (models/any_text_encoder.py); this one reaches the
encoder-decoders: every model type transformers maps to a seq2seq LM (`AutoModelForSeq2SeqLM`) that none of those
three covers (a type of an earlier kind resolves there: Pegasus, Marian, Blenderbot... have a decoder-only causal
LM and are held-out causal LMs; mT5, UMT5, T5Gemma have a sequence classifier and are held-out text encoders).
`any:<model_type>` (e.g. `any:m2m_100`, `any:led`, `any:fsmt`) takes transformers' default config for the type,
shrinks it and every sub-config it holds by the causal-LM shrinker's names plus the encoder-decoder ones (the
encoder and decoder layer counts, heads and FFN widths, T5's `d_kv`, the source and target vocabularies and
positions, a local-attention window; every layer a sparse one where a step spaces them), sets the vocabulary and
clamps the special token ids into it, zeroes dropout (and layer drop), and builds the seq2seq LM with random
weights. The inputs are the encoder's token ids of the drawn batch and sequence (drawn above the small special ids,
as the hand-written encoder-decoder families draw them), an attention mask that pads the tail of the last sequence
when the draw says so (where the model takes one), and the decoder's token ids of the drawn decoder length, passed
explicitly (no `decoder_start_token_id` shift, no pad handling); the output is the decoder's logits.

Nothing is special-cased per model type: a type this does not reach (no `input_ids` or `decoder_input_ids`
argument, a config that does not shrink, an eager failure, over MAX_PARAMS) is a SKIP with the reason.
"""
from __future__ import annotations

import inspect
import random

import torch

from models import any_causal_lm, any_image_classifier, any_text_encoder
from models.any_causal_lm import _TOKEN_IDS, put_attr, resize, sample as text_sample, set_ints, sized, zero_dropout
from models.any_text_encoder import _MORE_TOKEN_IDS, _configs, _low_id

# the hand-written families' types (models/families.py; the other shrinkers' SEEN), with the one a family draws
# under another name: the BART family's pre-norm variant is mBART
SEEN = any_text_encoder.SEEN | frozenset({"mbart"})
# encoder-decoder size attributes, by the names transformers' seq2seq configs give them
_ENCODER_LAYERS = ("encoder_layers", "num_encoder_layers")
_DECODER_LAYERS = ("decoder_layers", "num_decoder_layers")
_SIDE_HEADS = ("encoder_attention_heads", "decoder_attention_heads")
_SIDE_INTER = ("encoder_ffn_dim", "decoder_ffn_dim")
_SIDE_VOCAB = ("src_vocab_size", "tgt_vocab_size", "decoder_vocab_size", "target_vocab_size")
_SIDE_POSITIONS = ("max_encoder_position_embeddings", "max_decoder_position_embeddings", "max_source_positions",
                   "max_target_positions")


def sample(rng: random.Random) -> dict:
    """The causal-LM draw's sizes (hidden, heads, encoder layers, batch, sequence, vocabulary...), plus padding
    of the last source sequence's tail (0: none), the decoder's layers and its sequence length, as the
    hand-written encoder-decoder families draw them."""
    c = text_sample(rng)
    c.update(pad=rng.choice([0, rng.randint(1, max(1, c["seq"] // 2))]), decoder_layers=rng.randint(1, 3),
             decoder_seq=rng.randint(2, 16))
    return c


def shrunk_config(model_type: str, c: dict):
    """transformers' default config of `model_type`, it and its sub-configs shrunk from the draw `c`."""
    from transformers import AutoConfig
    top = AutoConfig.for_model(model_type)
    for cfg in _configs(top):
        resize(cfg, c)
        set_ints(cfg, _ENCODER_LAYERS, c["layers"])
        set_ints(cfg, _DECODER_LAYERS, c["decoder_layers"])
        set_ints(cfg, _SIDE_HEADS, c["heads"])
        set_ints(cfg, _SIDE_INTER, c["inter"])
        set_ints(cfg, ("d_kv",), c["head_dim"])
        # every layer a sparse (expert) layer where the config spaces them by a step (a default step of 4 leaves
        # the drawn 1-3 layers dense), as the causal-LM shrinker's first_k_dense_replace = 0
        set_ints(cfg, ("encoder_sparse_step", "decoder_sparse_step"), 1)
        set_ints(cfg, _SIDE_POSITIONS, 128)
        # a local-attention window the input is padded to a multiple of (even): within the positions kept
        set_ints(cfg, ("attention_window",), 2 * max(1, c["seq"] // 4))
        set_ints(cfg, ("embedding_size", "embed_dim"), c["hidden"])  # as the vision shrinker sets them
        set_ints(cfg, ("vocab_size", *_SIDE_VOCAB), c["vocab"])
        for n in (*_TOKEN_IDS, *_MORE_TOKEN_IDS):
            if isinstance(getattr(cfg, n, None), int):
                put_attr(cfg, n, min(getattr(cfg, n), c["vocab"] - 1))
        zero_dropout(cfg)
        for n, v in list(vars(cfg).items()):  # layer drop too (inactive in eval mode; zero all the same)
            if isinstance(v, float) and "layerdrop" in n:
                put_attr(cfg, n, 0.0)
        put_attr(cfg, "tie_word_embeddings", c["tied"])
        put_attr(cfg, "use_cache", False)
    return top


def build(model_type: str, c: dict):
    """(model, (ids[, mask], decoder ids), (names,)) for the draw: weights from torch's global generator, then
    the inputs."""
    from transformers import AutoModelForSeq2SeqLM
    cfg = shrunk_config(model_type, c)
    sized(AutoModelForSeq2SeqLM, cfg, model_type)
    model = AutoModelForSeq2SeqLM.from_config(cfg)
    params = list(inspect.signature(model.forward).parameters)
    if missing := [n for n in ("input_ids", "decoder_input_ids") if n not in params]:
        raise ValueError(f"{model_type}: {type(model).__name__}.forward takes no {' or '.join(missing)} (its first "
                         f"argument is {params[0]!r}): not a text-to-text encoder-decoder this shrinker feeds")
    low = _low_id(cfg, c["vocab"])
    ids = torch.randint(low, c["vocab"], (c["batch"], c["seq"]))
    decoder_ids = torch.randint(low, c["vocab"], (c["batch"], c["decoder_seq"]))
    if "attention_mask" not in params:
        return model, (ids, decoder_ids), ("input_ids", "decoder_input_ids")
    mask = torch.ones(c["batch"], c["seq"], dtype=torch.long)
    if c["pad"]:  # the last sequence's tail padded, one token kept at least
        mask[-1, c["seq"] - min(c["pad"], c["seq"] - 1):] = 0
    return model, (ids, mask, decoder_ids), ("input_ids", "attention_mask", "decoder_input_ids")


def types() -> list[str]:
    """Every model type transformers maps to a seq2seq LM that is neither a causal LM, an image classifier nor a
    text encoder (those are the other three shrinkers'), in name order."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
    other = set(any_causal_lm.types()) | set(any_image_classifier.types()) | set(any_text_encoder.types())
    return sorted(set(MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES) - other)


def held_out_types() -> list[str]:
    """Seq2seq types not among the hand-written families (buildable or not: the sweep reports which)."""
    return [t for t in types() if t not in SEEN]
