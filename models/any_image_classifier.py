"""Held-out vision families: any transformers image classifier, shrunk from its own default config (issue 27).

The causal-LM shrinker (models/any_causal_lm.py) reaches language models; vision models size themselves by
per-stage lists (`depths`, `hidden_sizes`, per-stage heads) as well as by scalars. `any:<model_type>` for an
image-classification type (e.g. `any:pvt_v2`, `any:focalnet`, `any:regnet`) takes transformers' default
config, shrinks the scalar sizes by the causal-LM shrinker's names, makes every per-stage list small (one or
two blocks a stage, widths doubling from a drawn base in multiples of 8, heads that divide them), sets a
small image (and keeps the patch no larger than it), zeroes dropout and drop-path, and builds
`AutoModelForImageClassification` with random weights. The model's first forward argument gets the image.

Nothing is special-cased per model type: a type this does not reach fails to build, fails eager, or is over
MAX_PARAMS, and the sweep reports a SKIP with the reason.
"""
from __future__ import annotations

import inspect
import random

import torch

from models.any_causal_lm import put_attr, resize, sample as text_sample, set_ints, sized, zero_dropout

_STAGE_DEPTHS = ("depths", "num_block_repeats", "stage_num_blocks", "depth")
_STAGE_WIDTHS = ("hidden_sizes", "stage_out_channels", "neck_hidden_sizes")
_STAGE_HEADS = ("num_heads", "num_attention_heads")
# the hand-written families' vision types (models/families.py): not held out
SEEN = frozenset({"vit", "deit", "swin", "convnext", "convnextv2", "resnet", "mobilenet_v2"})


def sample(rng: random.Random) -> dict:
    """The causal-LM draw's sizes (hidden, heads, layers...), plus an image and a per-stage base width."""
    c = text_sample(rng)
    c.update(image=rng.choice([32, 48, 64]), base=rng.choice([8, 16, 24]), stage_depth=rng.choice([1, 2]),
             labels=rng.randint(3, 12))
    return c


def _ints(v) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def _power_of_two_at_most(n: int) -> int:
    return 1 << max(0, n.bit_length() - 1)


def _shrink_stages(cfg, c: dict) -> None:
    """Per-stage lists: the stage count kept (other lists are indexed by stage), each stage made small: widths
    doubling from the drawn base, one or two blocks, heads a power of two that divides the width."""
    for n in _STAGE_WIDTHS:
        if _ints(getattr(cfg, n, None)):
            put_attr(cfg, n, [c["base"] * 2 ** min(i, 3) for i in range(len(getattr(cfg, n)))])
    for n in _STAGE_DEPTHS:
        if _ints(getattr(cfg, n, None)):
            put_attr(cfg, n, [min(d, c["stage_depth"]) for d in getattr(cfg, n)])
    widths = next((getattr(cfg, n) for n in _STAGE_WIDTHS if _ints(getattr(cfg, n, None))), None)
    for n in _STAGE_HEADS:
        heads = getattr(cfg, n, None)
        if _ints(heads):  # without a widths list a stage is embed_dim x 2^i wide (Swin's layout)
            dims = widths or [c["hidden"] * 2 ** i for i in range(len(heads))]
            put_attr(cfg, n, [_power_of_two_at_most(max(1, min(h, dims[min(i, len(dims) - 1)] // 8)))
                          for i, h in enumerate(heads)])


def shrunk_config(model_type: str, c: dict):
    """transformers' default config of `model_type`, its vision part shrunk from the draw `c`."""
    from transformers import AutoConfig
    top = AutoConfig.for_model(model_type)
    for cfg in {id(x): x for x in (top, getattr(top, "vision_config", None)) if x is not None}.values():
        resize(cfg, c)
        _shrink_stages(cfg, c)
        set_ints(cfg, ("embedding_size", "embed_dim", "hidden_dim"), c["hidden"])
        set_ints(cfg, ("image_size", "img_size", "input_size"), c["image"])
        patch = getattr(cfg, "patch_size", None)
        if isinstance(patch, int) and not isinstance(patch, bool) and patch > c["image"] // 4:
            put_attr(cfg, "patch_size", c["image"] // 4)  # a patch no larger than a quarter of the image
        set_ints(cfg, ("window_size",), 4)
        zero_dropout(cfg)
    top.num_labels = c["labels"]
    return top


def build(model_type: str, c: dict):
    """(model, (image,), (input name,)) for the draw: weights from torch's global generator, then the image."""
    from transformers import AutoModelForImageClassification
    cfg = shrunk_config(model_type, c)
    sized(AutoModelForImageClassification, cfg, model_type)
    model = AutoModelForImageClassification.from_config(cfg)
    vision = getattr(cfg, "vision_config", None) or cfg
    channels = getattr(vision, "num_channels", 3)
    image = torch.randn(c["batch"], channels if isinstance(channels, int) else 3, c["image"], c["image"])
    name = next(iter(inspect.signature(model.forward).parameters))
    return model, (image,), (name,)


def types() -> list[str]:
    """Every model type transformers maps to an image classifier, in name order."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES
    return sorted(MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES)


def held_out_types() -> list[str]:
    """Image-classifier types not among the hand-written families (buildable or not: the sweep reports which)."""
    return [t for t in types() if t not in SEEN]
