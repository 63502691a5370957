"""What every comparison core reduces: the accumulators of one pair (one registry entry each, in the order
the cores emit them), their constants, and the chunking all cores share. Apart from metrics.py so that the
cores (cores/) and the metrics built on them import this, not each other."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

EPS = torch.finfo(torch.float64).eps
DEFAULT_CHUNK_ELEMS = 1 << 22  # 4 Mi elements: ~32 MiB per fp64 temporary
# Binary octaves of |expected| above the small-value threshold, for the per-magnitude max relative error
# (the verdict compares compiled and eager octave by octave: an error is judged against what eager does on
# values of the same size). 40 octaves cover every default threshold (2^-20) with room; larger values share
# the top octave.
OCTAVES = 40


@dataclass(frozen=True)
class Accumulator:
    combine: str  # "sum" or "max" across chunks
    what: str  # its definition; `cores.torch_core._pair` defines it
    size: int = 1  # entries: 1 for a scalar, OCTAVES for a per-octave vector


# Per pair (N actual, B expected; "finite": both finite, the other positions left out of the error sums).
ACCUMULATORS: dict[str, Accumulator] = {
    "numel": Accumulator("sum", "elements"),
    "n_finite": Accumulator("sum", "positions where N and B are both finite"),
    "a_nonfinite": Accumulator("sum", "NaN/Inf in N"),
    "b_nonfinite": Accumulator("sum", "NaN/Inf in B"),
    "b_nan": Accumulator("sum", "NaN in B"),
    "nonfinite_mismatch": Accumulator("sum", "positions whose NaN/+Inf/-Inf class differs"),
    "sq_err": Accumulator("sum", "sum |N-B|^2 (finite)"),
    "sum_err": Accumulator("sum", "sum (N-B), signed (finite)"),
    "max_abs": Accumulator("max", "max |N-B| (finite)"),
    # msprobe's benchmark standard leaves small values out of the relative errors (they are judged by
    # absolute error, in small_err): |B| near 0 would make RE meaningless
    "max_rel": Accumulator("max", "max RE = |N-B|/(|B|+eps) over non-small |B|"),
    "sum_rel": Accumulator("sum", "sum RE over non-small |B|"),
    "sq_rel": Accumulator("sum", "sum RE^2 over non-small |B|"),
    "n_big": Accumulator("sum", "finite positions with |B| >= small-value threshold"),
    "dot": Accumulator("sum", "sum N*B (finite)"),
    "a_sq": Accumulator("sum", "sum N^2 (finite)"),
    "b_sq": Accumulator("sum", "sum B^2 (finite)"),
    "ulp_max": Accumulator("max", "max |N-B| * 2^(mantissa - eb), eb = max(floor(log2|B|), min_eb)"),
    "ulp_sum": Accumulator("sum", "sum of the ULP distances"),
    "ulp_gt1": Accumulator("sum", "ULP distance > 1"),
    "small_n": Accumulator("sum", "finite positions with |B| < small-value threshold"),
    "small_err": Accumulator("sum", "small |B| with |N-B| > small atol"),
    "small_max_abs": Accumulator("max", "max |N-B| over small |B|"),
    "rel_lt_1e-3": Accumulator("sum", "finite with RE < 1e-3"),
    "rel_lt_5e-3": Accumulator("sum", "finite with RE < 5e-3"),
    "mismatches": Accumulator("sum", "finite with |N-B| > atol + rtol*|B|, or NaN/Inf class differs"),
    "bits_equal": Accumulator("sum", "identical bits (same dtype), else -1"),
    # per octave of |B| (non-small, finite): element count and largest absolute error (within an octave
    # |B| varies by 2x at most; absolute errors there are identically distributed when they come from a sum)
    "octave_n": Accumulator("sum", "non-small finite elements per octave floor(log2|B|) - floor(log2 thr)",
                            OCTAVES),
    "octave_max_abs": Accumulator("max", "max |N-B| per octave (non-small)", OCTAVES),
}


# entries combined across chunks by sum (the others by max), in emission order
SUM_COLUMNS = torch.tensor([a.combine == "sum" for a in ACCUMULATORS.values() for _ in range(a.size)])
COLUMNS = [name for name, a in ACCUMULATORS.items() for _ in range(a.size)]  # each entry's accumulator
# sums whose terms take both signs: their rounding is bounded through Cauchy-Schwarz by sums of squares
# (|sum N B| <= sqrt(sum N^2 sum B^2), sum |N - B| <= sqrt(n sum (N-B)^2)), not by their own value, which cancels
SIGNED_SUMS = {"dot": ("a_sq", "b_sq"), "sum_err": ("n_finite", "sq_err")}


def rows_agree(got: torch.Tensor, want: torch.Tensor, rtol: float, sums: torch.Tensor | None = None) -> bool:
    """Two cores' [pairs, entries] rows agree (a core's first-call self-check): to `rtol`, a signed sum to `rtol`
    of its Cauchy-Schwarz bound; with `sums` (a column mask), the other entries (counts, maxima) exactly. Any
    other shape (a vector of maxima) agrees to `rtol`."""
    close = torch.isclose(got, want, rtol=rtol, atol=0.0, equal_nan=True)
    rows = got.dim() == 2 and got.shape[1] == len(COLUMNS)
    for name, (x, y) in SIGNED_SUMS.items() if rows else ():
        i, a, b = COLUMNS.index(name), COLUMNS.index(x), COLUMNS.index(y)
        close[:, i] |= (got[:, i] - want[:, i]).abs() <= rtol * (want[:, a] * want[:, b]).sqrt()
    if sums is not None:
        close = torch.where(sums, close, (got == want) | (got.isnan() & want.isnan()))
    return bool(close.all())


def iter_aligned_chunks(tensors: list[torch.Tensor], chunk_elems: int) -> Iterator[list[torch.Tensor]]:
    """Yield equal-length flat chunks of same-shape tensors without flattening a non-contiguous whole."""
    numel = tensors[0].numel()
    if all(t.is_contiguous() for t in tensors) or tensors[0].dim() == 0:
        flats = [t.reshape(-1) for t in tensors]
        for start in range(0, numel, chunk_elems):
            yield [f[start:start + chunk_elems] for f in flats]
        return
    rows = tensors[0].shape[0]
    per_row = max(1, numel // max(rows, 1))
    step = max(1, chunk_elems // per_row)
    for start in range(0, rows, step):
        yield [t[start:start + step].reshape(-1) for t in tensors]
