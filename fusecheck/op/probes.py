"""The probe variants of one shape: NaN/Inf planted in an input, and rows scaled to huge/tiny/subnormal.

A probe is a small entry: which inputs it changes and how the three runs (fused, eager reference, fp64
golden) are judged. The planting and scaling are layer 2's of `fusecheck dist` (one implementation), so both
commands probe alike: specials go in a subset of positions that leaves finite output for a row- or column-
wise op, and magnitude probes scale the even rows of each group of same-shaped inputs together.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from fusecheck.distributed.layers import MAGNITUDES, plant_specials, scale_rows


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


def _nonfinite_as_nan(t: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isfinite(t), t, torch.full((), float("nan"), dtype=t.dtype, device=t.device)) \
        if t.is_floating_point() else t


# promise -> how fused, eager and golden are seen before the one comparison: "exact" keeps NaN, +Inf, -Inf
# apart (the positions and kinds of the golden), "positions" only asks for non-finite where the golden is
PROPAGATION: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "exact": _same,
    "positions": _nonfinite_as_nan,
}


@dataclass(frozen=True)
class Probe:
    """`name` as the report shows it; `inputs` changed; `promise` for a NaN/Inf probe, else None."""

    name: str
    kind: str                 # "nan_inf" or "magnitude"
    inputs: tuple[str, ...]
    magnitude: str | None = None
    promise: str | None = None


def floating(inputs: dict) -> list[str]:
    return [k for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel()]


def special_promises(spec, inputs: dict) -> dict[str, str]:
    """{input: promise} of the NaN/Inf probes: every floating input "exact" unless the spec says otherwise."""
    from fusecheck.op.spec import SpecError
    declared = getattr(spec, "special_inputs", None)
    names = floating(inputs)
    if declared is None:
        return {k: "exact" for k in names}
    if not isinstance(declared, dict):
        raise SpecError(f"{type(spec).__name__}.special_inputs must be a dict {{input: promise or None}}, "
                        f"not {type(declared).__name__}")
    unknown = sorted(set(declared) - set(names))
    if unknown:
        raise SpecError(f"{type(spec).__name__}.special_inputs names {unknown}, which are not floating inputs "
                        f"(the inputs are {sorted(inputs)})")
    bad = {k: v for k, v in declared.items() if v is not None and v not in PROPAGATION}
    if bad:
        raise SpecError(f"{type(spec).__name__}.special_inputs: unknown promise(s) {bad}; known: "
                        f"{', '.join(PROPAGATION)} (or None: no probe)")
    return {k: v for k, v in declared.items() if v is not None}


def probes_for(spec, inputs: dict) -> list[Probe]:
    """NaN/Inf in each input that takes them, then each magnitude on each group of same-shaped inputs."""
    out = [Probe(f"nan_inf:{k}", "nan_inf", (k,), promise=p) for k, p in special_promises(spec, inputs).items()]
    groups: dict[tuple, list[str]] = {}
    for k in floating(inputs):
        groups.setdefault(tuple(inputs[k].shape), []).append(k)
    for m in MAGNITUDES:
        out += [Probe(f"magnitude:{m}:{'+'.join(g)}", "magnitude", tuple(g), magnitude=m) for g in groups.values()]
    return out


def apply(probe: Probe, inputs: dict, seed: int) -> dict | None:
    """A copy of `inputs` with the probe applied, or None when it cannot apply (an all-zero input)."""
    out = dict(inputs)
    if probe.kind == "nan_inf":
        (name,) = probe.inputs
        out[name] = plant_specials(inputs[name], torch.Generator().manual_seed(seed * 7919 + len(name)))
        return out
    dtype = inputs[probe.inputs[0]].dtype
    scaled = scale_rows({k: inputs[k] for k in probe.inputs}, list(probe.inputs), MAGNITUDES[probe.magnitude](
        torch.finfo(dtype)))
    if not scaled:
        return None
    out.update(scaled)
    return out
