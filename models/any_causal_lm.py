"""Held-out families: any transformers causal LM, shrunk from its own default config (issue 27).

The hand-written families in models/families.py are the ones the verdict was developed on. To see how it
does on architectures nobody looked at, `any:<model_type>` (e.g. `any:olmo2`, `any:starcoder2`) takes
transformers' default config for that model type, shrinks every size attribute it recognises to a size drawn
from the seed (the same draw ranges as the hand-written families), zeroes dropout, and builds
`AutoModelForCausalLM` with random weights. `held_out_types()` lists the causal-LM model types that are not
among the hand-written families, so a sweep over them is a sweep over unseen code.

Nothing is special-cased per model type: a type whose config does not shrink this way fails to build (or is
over MAX_PARAMS after shrinking) and the sweep reports it as a SKIP with the reason, not patched.
"""
from __future__ import annotations

import random

import torch

# attribute names that mean the same size across transformers configs
_HIDDEN = ("hidden_size", "n_embd", "d_model", "dim", "model_dim")
_HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "attention_heads")
_KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num")
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_INTER = ("intermediate_size", "n_inner", "ffn_dim", "d_ff", "ffn_hidden_size", "mlp_dim")
_POSITIONS = ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "seq_length")
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_EXPERT_INTER = ("moe_intermediate_size", "expert_intermediate_size", "shared_expert_intermediate_size")
_TOPK = ("num_experts_per_tok", "moe_top_k", "num_experts_per_token", "top_k")
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id")
MAX_PARAMS = 10_000_000  # the hand-written families' draws stay under 1e6
# the hand-written families' model types (models/families.py): not held out
SEEN = frozenset({"gpt2", "llama", "qwen2", "gemma2", "bloom", "falcon", "gpt_neox", "phi", "bert", "roberta",
                  "t5", "bart", "mixtral", "qwen2_moe", "mamba", "mamba2", "albert", "deberta-v2", "fnet",
                  "opt", "gptj", "mistral", "whisper"})


def sample(rng: random.Random) -> dict:
    """Sizes drawn as the hand-written families draw them (models/families.py); widths in multiples of 8, as
    real models have them (grouped expert matmuls need rows of 16-byte multiples)."""
    head_dim = rng.choice([8, 16, 32])
    heads = rng.choice([2, 4])
    hidden = heads * head_dim
    return {"hidden": hidden, "heads": heads, "kv_heads": rng.choice([h for h in (1, 2, heads) if heads % h == 0]),
            "head_dim": head_dim, "inter": 8 * rng.randint(hidden // 8, hidden // 2), "layers": rng.randint(1, 3),
            "experts": rng.choice([2, 4]), "top_k": rng.choice([1, 2]), "init_std": rng.choice([0.02, 0.05]),
            "batch": rng.randint(1, 3), "seq": rng.randint(3, 24), "vocab": rng.randint(40, 300),
            "tied": rng.random() < 0.5}


def put_attr(cfg, name: str, value) -> None:
    try:
        setattr(cfg, name, value)
    except (AttributeError, NotImplementedError):  # a property derived from other attributes (no setter), or
        pass                                        # one the config refuses to take alone: it keeps its own


def set_ints(cfg, names, value) -> None:
    for n in names:
        if isinstance(getattr(cfg, n, None), int) and not isinstance(getattr(cfg, n), bool):
            put_attr(cfg, n, value)


def resize(cfg, c: dict) -> None:
    """Every size attribute of `cfg` this shrinker recognises by name set from the draw `c`, in place (the
    vision shrinker uses it too: models/any_image_classifier.py)."""
    old_layers = next((getattr(cfg, n) for n in _LAYERS if isinstance(getattr(cfg, n, None), int)), None)
    set_ints(cfg, _HIDDEN, c["hidden"])
    set_ints(cfg, _HEADS, c["heads"])
    set_ints(cfg, _KV_HEADS, c["kv_heads"])
    set_ints(cfg, ("head_dim", "kv_channels", "attention_head_dim", "rotary_dim"), c["head_dim"])
    set_ints(cfg, _LAYERS, c["layers"])
    set_ints(cfg, _INTER, c["inter"])
    set_ints(cfg, _EXPERT_INTER, max(16, c["inter"] // 16 * 8))  # rows of 16-byte multiples: grouped_mm needs them
    set_ints(cfg, _EXPERTS, c["experts"])
    set_ints(cfg, _TOPK, min(c["top_k"], c["experts"]))
    set_ints(cfg, ("n_shared_experts", "num_shared_experts"), 1)
    set_ints(cfg, ("first_k_dense_replace",), 0)
    set_ints(cfg, ("n_group", "topk_group"), 1)
    set_ints(cfg, ("kv_lora_rank",), c["hidden"] // 2)
    set_ints(cfg, ("q_lora_rank",), c["hidden"] // 2)
    set_ints(cfg, ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"), c["head_dim"])
    set_ints(cfg, _POSITIONS, 128)
    set_ints(cfg, ("sliding_window",), max(4, c["seq"] // 2))
    layer_types = getattr(cfg, "layer_types", None)
    if isinstance(layer_types, (list, tuple)) and old_layers:
        put_attr(cfg, "layer_types", list(layer_types)[: c["layers"]])
    if hasattr(cfg, "initializer_range"):
        cfg.initializer_range = c["init_std"]


def zero_dropout(cfg) -> None:
    """Every dropout and drop-path probability of `cfg` set to 0 (the grid compares deterministic runs)."""
    for n, v in list(vars(cfg).items()):
        if isinstance(v, float) and ("dropout" in n or "pdrop" in n or n.endswith("_drop") or "drop_path" in n):
            put_attr(cfg, n, 0.0)


def sized(model_cls, cfg, model_type: str) -> int:
    """The parameter count of `model_cls` built from `cfg` on the meta device (no memory taken); a config this
    shrinker cannot reach is refused here, before it is built."""
    with torch.device("meta"):
        params = sum(p.numel() for p in model_cls.from_config(cfg).parameters())
    if params > MAX_PARAMS:
        raise ValueError(f"{model_type}: {params:,} parameters after shrinking (at most {MAX_PARAMS:,}): its config "
                         "sizes the model by attributes this shrinker does not know")
    return params


def shrunk_config(model_type: str, c: dict):
    """transformers' default config of `model_type` with every recognised size set from the draw `c`."""
    from transformers import AutoConfig
    cfg = AutoConfig.for_model(model_type)
    cfg = getattr(cfg, "text_config", None) or cfg
    resize(cfg, c)
    set_ints(cfg, ("vocab_size",), c["vocab"])
    for n in _TOKEN_IDS:
        if isinstance(getattr(cfg, n, None), int):
            put_attr(cfg, n, min(getattr(cfg, n), c["vocab"] - 1))
    zero_dropout(cfg)
    cfg.tie_word_embeddings = c["tied"]
    cfg.use_cache = False
    return cfg


def build(model_type: str, c: dict):
    """(model, (input_ids,)) for the draw: weights from torch's global generator, as the families do."""
    from transformers import AutoModelForCausalLM
    cfg = shrunk_config(model_type, c)
    sized(AutoModelForCausalLM, cfg, model_type)
    model = AutoModelForCausalLM.from_config(cfg)
    ids = torch.randint(0, c["vocab"], (c["batch"], c["seq"]))
    return model, (ids,)


def types() -> list[str]:
    """Every model type transformers maps to a causal LM, in name order."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def held_out_types() -> list[str]:
    """Causal LM types not among the hand-written families (buildable or not: the sweep reports which)."""
    return [t for t in types() if t not in SEEN]
