"""The comparison cores: one protocol, one registry, one dispatch.

Every core computes the same thing — the accumulators of `accumulators.ACCUMULATORS` for every pair from one
read of each chunk — and differs only in how fast, where. Each core module has

    walk(tensors, pairs, device, acc, fparams, iparams) -> Tensor [pairs, entries] | None
    finite_abs_max(tensors) -> float | None

and optionally `walk_at_scale` (the thresholds scaled on the device, see `walk_at_scale` below).

and None means "not here" (wrong device or dtype, below its size, not built, failed its self-check): the
next core in `CORES` answers. The torch core is last and always answers (None from it: no elements). The
fast cores check themselves against it on first use, so a miscompiled core can slow a run, never pass one.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

import torch


@dataclass(frozen=True)
class Core:
    name: str                            # what it is, as docs/benchmarks.md names it
    module: str                          # imported on first use (the C build and Triton are not free)
    devices: frozenset[str] | None       # device types it answers for; None: any

    def applies(self, device: torch.device) -> bool:
        return self.devices is None or device.type in self.devices

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


CORES: tuple[Core, ...] = (
    Core("C", "fusecheck.compare.cores.c_core", frozenset({"cpu"})),
    Core("Triton", "fusecheck.compare.cores.triton_core", frozenset({"cuda"})),
    Core("Inductor", "fusecheck.compare.cores.inductor_core", None),  # opt-in (FUSECHECK_COMPILED_COMPARE=1)
    Core("torch", "fusecheck.compare.cores.torch_core", None),
)
TORCH = CORES[-1]


def walk(tensors: list[torch.Tensor], pairs: tuple[tuple[int, int], ...], device: torch.device,
         acc: torch.dtype, fparams: torch.Tensor, iparams: torch.Tensor,
         chunk_elems: int | None = None) -> torch.Tensor | None:
    """[pairs, entries] from the first core that answers (None: no elements). An explicit `chunk_elems`
    asks for the torch core at that chunk size (tests and benchmarks hold the others to it)."""
    if chunk_elems is not None:
        return TORCH.load().walk(tensors, pairs, device, acc, fparams, iparams, chunk_elems)
    for core in CORES:
        if core.applies(device):
            out = core.load().walk(tensors, pairs, device, acc, fparams, iparams)
            if out is not None or core is TORCH:
                return out
    raise AssertionError("unreachable: the torch core always answers")


def walk_at_scale(tensors: list[torch.Tensor], pairs: tuple[tuple[int, int], ...], device: torch.device,
                  acc: torch.dtype, fparams: torch.Tensor, iparams: torch.Tensor,
                  scale_of: tuple[int, ...]) -> tuple[torch.Tensor, float, list[float]] | None:
    """The scale pass and the walk in one launch sequence, by the first core for `device` if it offers that:
    ([pairs, entries], the scale, the thresholds it derived from unscaled `fparams`), or None (the caller
    takes the scale first, then walks). On an accelerator this saves the wait between the two passes; on the
    host there is no wait to save (and the later cores are not imported for it)."""
    core = next(c for c in CORES if c.applies(device))
    at_scale = getattr(core.load(), "walk_at_scale", None)
    return None if at_scale is None else at_scale(tensors, pairs, device, acc, fparams, iparams, scale_of)


def finite_abs_max(tensors: list[torch.Tensor], chunk_elems: int | None = None) -> float:
    """Largest |x| over the finite elements of same-shape floating tensors (0.0 when there is none)."""
    if chunk_elems is not None:
        return TORCH.load().finite_abs_max(tensors, chunk_elems)
    device = tensors[0].device
    for core in CORES:
        if core.applies(device):
            out = core.load().finite_abs_max(tensors)
            if out is not None:
                return out
    raise AssertionError("unreachable: the torch core always answers")
