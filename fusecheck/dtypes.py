"""The one dtype vocabulary of every command, report and policy file.

Users type and reports print the short names (fp32, bf16, fp16, fp64); torch's own names (float32, bfloat16,
...) and a few common spellings (half, float, double) are accepted wherever a dtype is read and mapped here,
so that no two commands disagree on what `--dtype bfloat16` means. No torch at import: `-h` answers without it.
"""
from __future__ import annotations

LONG = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}  # short -> torch's name
RUN_DTYPES = ("fp32", "bf16", "fp16")  # what a model or an op is checked in (fp64 is the golden's)
ALIASES = {**{s: s for s in LONG}, **{t: s for s, t in LONG.items()}, "half": "fp16", "float": "fp32",
           "double": "fp64"}


def short_name(name: str) -> str | None:
    """'bfloat16', 'torch.bfloat16', 'bf16' -> 'bf16'; None for a name that is not a known floating dtype."""
    return ALIASES.get(str(name).removeprefix("torch."))


def long_name(name: str) -> str | None:
    """'bf16', 'bfloat16' -> 'bfloat16' (torch's attribute name); None when unknown."""
    s = short_name(name)
    return LONG[s] if s else None


def torch_dtype(name: str):
    """The torch dtype of a known name (torch is imported here, not at the module's import)."""
    import torch

    return getattr(torch, LONG[short_name(name)])


def known(names: tuple[str, ...] = RUN_DTYPES) -> str:
    return ", ".join(names)
