"""Held-out encoder families: any transformers text encoder, shrunk from its own default config (issue 27).

The causal-LM shrinker (models/any_causal_lm.py) reaches the language models that predict the next token, the
vision shrinker (models/any_image_classifier.py) the image classifiers; this one reaches the bidirectional text
encoders: every model type transformers maps to a masked LM (`AutoModelForMaskedLM`) or, where a type has none,
to a sequence classifier (`AutoModelForSequenceClassification`), that is not a causal LM or an image classifier
(those are the other two shrinkers': `any:electra`, which has a causal-LM head too, is a held-out causal LM).
`any:<model_type>` (e.g. `any:distilbert`, `any:mpnet`, `any:squeezebert`) takes transformers' default config for
the type, shrinks every size attribute by the causal-LM shrinker's names (the config and each sub-config it holds;
the embedding width as the vision shrinker sets it), sets the vocabulary and clamps the special token ids into it,
zeroes dropout, and builds the masked LM (logits
per token) or the sequence classifier (logits per sequence) with random weights. The inputs are token ids of the
drawn batch and sequence (drawn above the small special ids, as the hand-written encoder families draw them) as
the model's first forward argument, and, where the model takes one, an attention mask that pads the tail of the
last sequence when the draw says so. A sequence classifier's sequences end with the config's eos id, as a
tokenizer writes them (heads that pool at the eos token need one). A config that leaves its vocabulary unset
gets the draw's; one that leaves its pad id unset gets 0, the id most vocabularies give it and one the drawn ids
never take (ESM's embeddings compare the ids against it to number the positions).

Nothing is special-cased per model type: a type this does not reach fails to build, fails eager, or is over
MAX_PARAMS, and the sweep reports a SKIP with the reason.
"""
from __future__ import annotations

import inspect
import random

import torch

from models import any_causal_lm, any_image_classifier
from models.any_causal_lm import _TOKEN_IDS, put_attr, resize, sample as text_sample, set_ints, sized, zero_dropout

# the hand-written families' types (models/families.py; the other two shrinkers' SEEN), with the types those
# families draw under other names: RoBERTa's pre-norm variant and wav2vec2
SEEN = any_causal_lm.SEEN | any_image_classifier.SEEN | frozenset({"roberta-prelayernorm", "wav2vec2"})
_MORE_TOKEN_IDS = ("cls_token_id", "mask_token_id", "unk_token_id")


def sample(rng: random.Random) -> dict:
    """The causal-LM draw's sizes (hidden, heads, layers, batch, sequence, vocabulary...), plus padding of the
    last sequence's tail (0: none), as the hand-written encoder families draw it, and labels for the types that
    classify sequences."""
    c = text_sample(rng)
    c.update(pad=rng.choice([0, rng.randint(1, max(1, c["seq"] // 2))]), labels=rng.randint(3, 12))
    return c


def _configs(top) -> list:
    """`top` and every config it holds as an attribute (text/vision/encoder sub-configs), each once."""
    from transformers import PretrainedConfig
    found = {id(top): top}
    for v in vars(top).values():
        if isinstance(v, PretrainedConfig):
            found.setdefault(id(v), v)
    return list(found.values())


def shrunk_config(model_type: str, c: dict):
    """transformers' default config of `model_type`, it and its sub-configs shrunk from the draw `c`."""
    from transformers import AutoConfig
    top = AutoConfig.for_model(model_type)
    for cfg in _configs(top):
        resize(cfg, c)
        set_ints(cfg, ("embedding_size", "embed_dim"), c["hidden"])  # as the vision shrinker sets them
        if hasattr(cfg, "vocab_size") and (getattr(cfg, "vocab_size") is None
                                           or type(getattr(cfg, "vocab_size")) is int):  # None: left to the user
            put_attr(cfg, "vocab_size", c["vocab"])
        if hasattr(cfg, "pad_token_id") and cfg.pad_token_id is None:
            put_attr(cfg, "pad_token_id", 0)
        for n in (*_TOKEN_IDS, *_MORE_TOKEN_IDS):
            if isinstance(getattr(cfg, n, None), int):
                put_attr(cfg, n, min(getattr(cfg, n), c["vocab"] - 1))
        zero_dropout(cfg)
        put_attr(cfg, "tie_word_embeddings", c["tied"])
        put_attr(cfg, "use_cache", False)
    top.num_labels = c["labels"]
    return top


def auto_class(model_type: str):
    """AutoModelForMaskedLM where transformers has a masked LM for the type, else
    AutoModelForSequenceClassification."""
    from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES
    masked = model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    return AutoModelForMaskedLM if masked else AutoModelForSequenceClassification


def _low_id(cfg, vocab: int) -> int:
    """The smallest token id drawn: above every special id in the lower half of the vocabulary (pad, bos, eos,
    cls... sit at 0-4 in most vocabularies; a pad id in the ids changes positions and masks in some models)."""
    ids = [getattr(x, n) for x in _configs(cfg) for n in (*_TOKEN_IDS, *_MORE_TOKEN_IDS)
           if isinstance(getattr(x, n, None), int) and not isinstance(getattr(x, n), bool)]
    return 1 + max((i for i in ids if 0 <= i < vocab // 2), default=-1)


def build(model_type: str, c: dict):
    """(model, (ids[, mask]), (names,)) for the draw: weights from torch's global generator, then the inputs."""
    cls = auto_class(model_type)
    cfg = shrunk_config(model_type, c)
    sized(cls, cfg, model_type)
    model = cls.from_config(cfg)
    ids = torch.randint(_low_id(cfg, c["vocab"]), c["vocab"], (c["batch"], c["seq"]))
    params = list(inspect.signature(model.forward).parameters)
    masked = "attention_mask" in params[1:]
    mask = torch.ones(c["batch"], c["seq"], dtype=torch.long)
    if masked and c["pad"]:  # the last sequence's tail padded, one token kept at least
        mask[-1, c["seq"] - min(c["pad"], c["seq"] - 1):] = 0
    if cls.__name__ == "AutoModelForSequenceClassification":
        _end_with_eos(cfg, ids, mask, c["vocab"])
    return (model, (ids, mask), (params[0], "attention_mask")) if masked else (model, (ids,), (params[0],))


def _end_with_eos(cfg, ids: torch.Tensor, mask: torch.Tensor, vocab: int) -> None:
    """Each sequence's last kept token is the config's eos id, as a tokenizer writes it: classifier heads that
    pool at the eos token (BART's, MT5's) need one per example. Masked LMs' ids stay as drawn."""
    eos = getattr(cfg, "eos_token_id", None)
    if type(eos) is int and 0 <= eos < vocab:
        ids[torch.arange(ids.shape[0]), mask.sum(-1) - 1] = eos


def types() -> list[str]:
    """Every model type transformers maps to a masked LM or a sequence classifier that is neither a causal LM
    nor an image classifier (those are models/any_causal_lm.py's and models/any_image_classifier.py's), in name
    order."""
    from transformers.models.auto.modeling_auto import (MODEL_FOR_MASKED_LM_MAPPING_NAMES,
                                                        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES)
    other = set(any_causal_lm.types()) | set(any_image_classifier.types())
    return sorted((set(MODEL_FOR_MASKED_LM_MAPPING_NAMES) | set(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES))
                  - other)


def held_out_types() -> list[str]:
    """Text-encoder types not among the hand-written families (buildable or not: the sweep reports which)."""
    return [t for t in types() if t not in SEEN]
