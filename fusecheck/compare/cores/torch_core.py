"""The torch core: every accumulator of every pair from one load of result, eager and golden, as plain torch.
The reference every other core is checked against, and the one that always answers.

Why: the pairs (compiled-eager, compiled-golden, eager-golden) share their tensors, and every accumulator
is a reduction over the same elements, so a chunk is loaded (and upcast) once and reduced to all of them.
`chunk_partials` is that reduction written as plain torch. Eager it is ~80 vectorised passes per pair over a
cache-sized chunk. Compiled by Inductor (`inductor_core.py`) the element-wise work and the reductions of a pair
fuse into one loop (C++ on CPU, Triton on GPU) that keeps nothing per element in memory; only the
per-octave maxima stay separate scatter kernels (Inductor lowers no scatter-amax).

Exactly the definitions listed in `accumulators.ACCUMULATORS` (emitted in the registry's order: a missing
entry is a KeyError), held to the per-pair walk it replaced by tests/compare/test_compare_equivalence.py: every
per-element quantity is computed the same way, so counts and maxima are bit-identical and sums differ by
fp64 rounding order only. Exponents are read from the fp64 bits (torch.frexp fails to compile in
Inductor's C++ backend, torch 2.13), and 2^n is built from bits too, so the ULP scale is the exact power of
two torch.ldexp multiplies by.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch

from fusecheck.compare.accumulators import (ACCUMULATORS, DEFAULT_CHUNK_ELEMS, EPS, OCTAVES, SUM_COLUMNS,
                                            iter_aligned_chunks)

# float dtype -> (same-width int, mantissa bits, exponent bias)
_BITS = {torch.float64: (torch.int64, 52, 1023), torch.float32: (torch.int32, 23, 127)}


def _floor_log2(x: torch.Tensor) -> torch.Tensor:
    """floor(log2 x) for finite x >= 0, as int64; 0 -> -1 (torch.frexp(0).exponent - 1, as metrics does)."""
    int_dtype, mant, bias = _BITS[x.dtype]
    tiny = torch.finfo(x.dtype).tiny
    lift = mant + 12  # subnormals: scale into the normal range first (exact: a power of two)
    sub = x < tiny
    scaled = torch.where(sub, x * 2.0 ** lift, x)
    e = ((scaled.view(int_dtype) >> mant) & (2 * bias + 1)).to(torch.int64) - bias
    e = torch.where(sub, e - lift, e)
    return torch.where(x == 0, -1, e)


def _pow2(n: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """2.0**n exactly for integer n >= 1 - bias (inf above the largest exponent), built from the bits."""
    int_dtype, mant, bias = _BITS[dtype]
    field = (n.clamp(max=bias) + bias).to(int_dtype) << mant
    return torch.where(n > bias, torch.inf, field.view(dtype))


def _bits(x: torch.Tensor) -> torch.Tensor:
    int_view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return x.view(int_view[x.element_size()]) if x.is_floating_point() else x


def _class_differs(a: torch.Tensor, b: torch.Tensor, finite: torch.Tensor) -> torch.Tensor:
    """NaN/+Inf/-Inf class differs (metrics.classify_nonfinite(a) != classify_nonfinite(b)): the NaN
    status differs, or neither is NaN, one is infinite, and they differ (+Inf vs -Inf or vs a number)."""
    na, nb = torch.isnan(a), torch.isnan(b)
    return (na ^ nb) | (~(finite | na | nb) & (a != b))


def _count(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return mask.sum(dtype=dtype)


@functools.lru_cache(maxsize=1024)
def params(acc: torch.dtype, *, mant: int, min_eb: int, rtol: float, atol: float,
           small_threshold: float, small_atol: float, octave_base: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The thresholds as (CPU) tensors: a compiled core then serves every tensor's scale without a
    recompile (Python floats would be specialised into the graph). Kept per value (read only, never
    written): building two tensors cost ~10 us of every compare() call."""
    return (torch.tensor([rtol, atol, small_threshold, small_atol], dtype=acc),
            torch.tensor([mant, min_eb, octave_base], dtype=torch.int64))


def _pair(a: torch.Tensor, b: torch.Tensor, a_raw: torch.Tensor, b_raw: torch.Tensor, fparams: torch.Tensor,
          iparams: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every accumulator of one pair over one chunk (a, b upcast to the accumulation dtype)."""
    acc = a.dtype
    rtol, atol, small_threshold, small_atol = fparams.unbind()
    mant, min_eb, octave_base = iparams.unbind()
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    finite = fa & fb
    af, bf = torch.where(finite, a, 0.0), torch.where(finite, b, 0.0)
    absdiff = (af - bf).abs()
    babs = bf.abs()
    rel = absdiff / (babs + EPS)
    log2b = _floor_log2(babs)
    eb = torch.maximum(torch.where(babs > 0, log2b, min_eb), min_eb)
    ulp = torch.where(absdiff > 0, absdiff * _pow2(mant - eb, acc), 0.0)
    small = finite & (babs < small_threshold)
    big = finite & ~small
    rel_big = torch.where(small, 0.0, rel)
    err_big = torch.where(small, 0.0, absdiff)
    mismatch_nf = _class_differs(a, b, finite)
    octave = (log2b - octave_base).clamp(0, OCTAVES - 1)  # floor(log2|b|) - floor(log2 threshold)
    out = {
        "numel": torch.full((), a.numel(), dtype=acc, device=a.device),
        "n_finite": _count(finite, acc),
        "a_nonfinite": _count(~fa, acc),
        "b_nonfinite": _count(~fb, acc),
        "b_nan": _count(torch.isnan(b), acc),
        "nonfinite_mismatch": _count(mismatch_nf, acc),
        "sq_err": (absdiff * absdiff).sum(),
        "sum_err": (af - bf).sum(),
        "max_abs": absdiff.amax(),
        "max_rel": rel_big.amax(),
        "sum_rel": rel_big.sum(),
        "sq_rel": (rel_big * rel_big).sum(),
        "n_big": _count(big, acc),
        "dot": (af * bf).sum(),
        "a_sq": (af * af).sum(),
        "b_sq": (bf * bf).sum(),
        "ulp_max": ulp.amax(),
        "ulp_sum": ulp.sum(),
        "ulp_gt1": _count(ulp > 1, acc),
        "small_n": _count(small, acc),
        "small_err": _count(small & (absdiff > small_atol), acc),
        "small_max_abs": torch.where(small, absdiff, 0.0).amax(),
        "rel_lt_1e-3": _count(finite & (rel < 1e-3), acc),
        "rel_lt_5e-3": _count(finite & (rel < 5e-3), acc),
        "mismatches": _count((finite & (absdiff > atol + rtol * babs)) | mismatch_nf, acc),
        "bits_equal": (_count(_bits(a_raw) == _bits(b_raw), acc) if a_raw.dtype == b_raw.dtype
                       else torch.full((), -1.0, dtype=acc, device=a.device)),
        "octave_n": _per_octave(octave, big.to(acc), "sum"),
        "octave_max_abs": _per_octave(octave, err_big, "amax"),
    }
    return out


# Scatter slots per octave: on a GPU every element of a chunk landing on 40 addresses serialises the
# atomics, so element i goes to slot i % SLOTS of its octave and the slots are reduced after. One on CPU.
SLOTS = {"cpu": 1}
GPU_SLOTS = 4096


def _per_octave(octave: torch.Tensor, values: torch.Tensor, how: str) -> torch.Tensor:
    slots = SLOTS.get(values.device.type, GPU_SLOTS)
    if slots > 1:
        slot = torch.arange(values.numel(), device=values.device) % slots
        octave = octave + OCTAVES * slot
    bins = torch.zeros(OCTAVES * slots, dtype=values.dtype, device=values.device)
    bins = bins.scatter_add(0, octave, values) if how == "sum" else bins.scatter_reduce(0, octave, values, how)
    return bins.view(slots, OCTAVES).sum(0) if how == "sum" else bins.view(slots, OCTAVES).amax(0)


def chunk_partials(raws: list[torch.Tensor], pairs: tuple[tuple[int, int], ...], acc: torch.dtype,
                   fparams: torch.Tensor, iparams: torch.Tensor) -> torch.Tensor:
    """[pairs, entries] accumulators of one non-empty chunk, entries in `ACCUMULATORS` order (octaves
    flattened). Each raw chunk is upcast once however many pairs use it."""
    ups = [r.to(acc) for r in raws]
    rows = []
    for ia, ib in pairs:
        d = _pair(ups[ia], ups[ib], raws[ia], raws[ib], fparams, iparams)
        rows.append(torch.cat([d[n].reshape(-1) for n in ACCUMULATORS]))
    return torch.stack(rows)


# Eager on CPU: 64 Ki elements keep a chunk's fp64 temporaries (512 KiB each) in cache; 5x faster than
# 4 Mi on 2 cores (docs/benchmarks.md). On a GPU larger chunks mean fewer launches.
CPU_CHUNK_ELEMS = 1 << 16


def eager_chunk_elems(device: torch.device) -> int:
    return CPU_CHUNK_ELEMS if device.type == "cpu" else DEFAULT_CHUNK_ELEMS


@functools.lru_cache(maxsize=64)
def _zero_partials(dtypes: tuple[torch.dtype, ...], pairs, acc, fvalues: tuple, ivalues: tuple) -> torch.Tensor:
    """Partials of one zero element, on the CPU (no device launches, no sync)."""
    fparams = torch.tensor(fvalues, dtype=acc)
    iparams = torch.tensor(ivalues, dtype=torch.int64)
    return chunk_partials([torch.zeros(1, dtype=d) for d in dtypes], pairs, acc, fparams, iparams)


def pad_correction(raws: list[torch.Tensor], pairs, acc, fparams, iparams, pad: int) -> torch.Tensor:
    """What `pad` zero elements added to each entry: `pad` times one zero element's partials, on entries
    combined by sum (a zero adds nothing to a maximum: every maximised quantity is >= 0). A negative
    one-element entry is a flag (bits_equal -1: dtypes differ), not a count. `fparams`, `iparams` on CPU."""
    one = _zero_partials(tuple(r.dtype for r in raws), pairs, acc, tuple(fparams.tolist()), tuple(iparams.tolist()))
    return torch.where(SUM_COLUMNS & (one >= 0), one * pad, 0.0).to(raws[0].device, non_blocking=True)


Partials = Callable[[list[torch.Tensor]], torch.Tensor]


def reduce_chunks(tensors: list[torch.Tensor], device: torch.device, size: int, partials: Partials
                  ) -> torch.Tensor | None:
    """[pairs, entries] over all chunks of `size` elements, each chunk moved to `device` and reduced by
    `partials` (this core's, or the Inductor core's compiled one); None when there are no elements."""
    sums, maxes = None, None
    for chunk in iter_aligned_chunks(tensors, size):
        raws = [c.to(device) for c in chunk]
        if raws[0].numel() == 0:
            continue
        out = partials(raws)
        sums = out if sums is None else sums + out
        maxes = out if maxes is None else torch.maximum(maxes, out)
    if sums is None:
        return None
    return torch.where(SUM_COLUMNS.to(sums.device), sums, maxes)


def walk(tensors: list[torch.Tensor], pairs: tuple[tuple[int, int], ...], device: torch.device,
         acc: torch.dtype, fparams: torch.Tensor, iparams: torch.Tensor,
         chunk_elems: int | None = None) -> torch.Tensor | None:
    """The cores' protocol (cores/__init__.py): [pairs, entries], None only when there are no elements."""
    fparams, iparams = fparams.to(device), iparams.to(device)
    return reduce_chunks(tensors, device, chunk_elems or eager_chunk_elems(device),
                         lambda raws: chunk_partials(raws, pairs, acc, fparams, iparams))


def chunk_abs_max(raws: list[torch.Tensor]) -> torch.Tensor:
    """Largest finite |x| of each raw chunk, in its own dtype (exact: a maximum rounds nothing)."""
    return torch.stack([torch.where(torch.isfinite(r), r.abs(), 0).amax().to(torch.float64) for r in raws])


def abs_max_chunks(tensors: list[torch.Tensor], size: int, per_chunk: Partials) -> float:
    """Largest finite |x| over chunks of `size` elements, each reduced by `per_chunk` (0.0 if none)."""
    device, best = tensors[0].device, None
    with torch.no_grad():
        for chunk in iter_aligned_chunks(tensors, size):
            raws = [c.to(device) for c in chunk]
            if raws[0].numel():
                out = per_chunk(raws)
                best = out if best is None else torch.maximum(best, out)
    return 0.0 if best is None else float(best.max())


def finite_abs_max(tensors: list[torch.Tensor], chunk_elems: int | None = None) -> float:
    """The cores' protocol: largest |x| over the finite elements of same-shape floating tensors."""
    return abs_max_chunks(tensors, chunk_elems or eager_chunk_elems(tensors[0].device), chunk_abs_max)
