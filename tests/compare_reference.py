"""The comparison core as it was before the one-pass rewrite (issue 12), kept verbatim as the reference
that tests/compare/test_compare_equivalence.py holds the new core to: per-pair chunk walk, one accumulator function
per entry, and the per-tensor scale pre-pass. Not used by fusecheck itself."""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

EPS = torch.finfo(torch.float64).eps
DEFAULT_CHUNK_ELEMS = 1 << 22  # 4 Mi elements: ~32 MiB per fp64 temporary
# Binary octaves of |expected| above the small-value threshold, for the per-magnitude max relative error
# (the verdict compares compiled and eager octave by octave: an error is judged against what eager does on
# values of the same size). 40 octaves cover every default threshold (2^-20) with room; larger values share
# the top octave.
OCTAVES = 40

@functools.lru_cache(maxsize=None)
def ulp_format(dtype: torch.dtype) -> tuple[int, int]:
    """Mantissa bits and minimum normal exponent of a floating dtype, for the ULP metric (msprobe's
    definition): fp16 (10, -14), bf16 (7, -126), fp32 (23, -126), fp8 e4m3 (3, -6). Non-floating: fp32's."""
    if not dtype.is_floating_point:
        dtype = torch.float32
    info = torch.finfo(dtype)
    named = re.search(r"float8_e\dm(\d)", str(dtype))  # finfo(float8_e5m2fnuz).eps says 3 mantissa bits, not 2
    mantissa = int(named.group(1)) if named else round(-math.log2(info.eps))
    return mantissa, round(math.log2(info.smallest_normal))

# Devices on which fp64 is unavailable: accumulate in fp32 there.
NO_FP64_DEVICE_TYPES = {"mps"}


def accum_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type in NO_FP64_DEVICE_TYPES else torch.float64


@dataclass
class Chunk:
    """One aligned chunk of (actual, expected) upcast, with the per-element quantities every metric needs."""

    a: torch.Tensor          # actual, accumulation dtype, 0 where either side is not finite
    b: torch.Tensor          # expected, accumulation dtype, 0 where either side is not finite
    finite: torch.Tensor     # both finite
    absdiff: torch.Tensor    # |a - b| where finite, else 0
    babs: torch.Tensor       # |b| where finite, else 0
    rel: torch.Tensor        # msprobe RE where finite, else 0
    ulp: torch.Tensor        # ULP distance in `ulp_dtype` units where finite, else 0
    small: torch.Tensor      # finite and |b| below the small-value threshold
    nonfinite_mismatch: torch.Tensor  # NaN/+Inf/-Inf pattern differs
    bits_equal: torch.Tensor | None  # raw bitwise equality (same dtype only)
    rtol: float
    atol: float
    small_atol: float
    a_raw: torch.Tensor | None = None  # unmasked, for NaN/Inf counts
    b_raw: torch.Tensor | None = None
    octave: torch.Tensor | None = None  # int64 octave index of |b| above the small-value threshold


def _octave_n(c: Chunk) -> torch.Tensor:
    counted = (c.finite & ~c.small).to(c.a.dtype)
    return c.a.new_zeros(OCTAVES).scatter_add_(0, c.octave, counted)


def _octave_max_abs(c: Chunk) -> torch.Tensor:
    err = torch.where(c.small, 0.0, c.absdiff)  # absdiff is 0 where not finite
    return c.a.new_zeros(OCTAVES).scatter_reduce_(0, c.octave, err, "amax")


@dataclass(frozen=True)
class Accumulator:
    combine: str  # "sum" or "max"
    fn: Callable[[Chunk], torch.Tensor]
    size: int = 1  # entries per chunk: 1 for a scalar, OCTAVES for a per-octave vector


ACCUMULATORS: dict[str, Accumulator] = {
    "numel": Accumulator("sum", lambda c: torch.tensor(float(c.a.numel()), dtype=c.a.dtype, device=c.a.device)),
    "n_finite": Accumulator("sum", lambda c: c.finite.sum(dtype=c.a.dtype)),
    "a_nonfinite": Accumulator("sum", lambda c: (~torch.isfinite(c.a_raw)).sum(dtype=c.a.dtype)),
    "b_nonfinite": Accumulator("sum", lambda c: (~torch.isfinite(c.b_raw)).sum(dtype=c.a.dtype)),
    "b_nan": Accumulator("sum", lambda c: torch.isnan(c.b_raw).sum(dtype=c.a.dtype)),
    "nonfinite_mismatch": Accumulator("sum", lambda c: c.nonfinite_mismatch.sum(dtype=c.a.dtype)),
    "sq_err": Accumulator("sum", lambda c: torch.dot(c.absdiff, c.absdiff)),
    "max_abs": Accumulator("max", lambda c: c.absdiff.max() if c.absdiff.numel() else c.absdiff.new_zeros(())),
    # msprobe's benchmark standard leaves small values out of the relative errors (they are judged by
    # absolute error, in small_err): |B| near 0 would make RE meaningless
    "max_rel": Accumulator("max", lambda c: (torch.where(c.small, 0.0, c.rel).max() if c.rel.numel()
                                             else c.rel.new_zeros(()))),
    "sum_rel": Accumulator("sum", lambda c: torch.where(c.small, 0.0, c.rel).sum()),
    "sq_rel": Accumulator("sum", lambda c: (lambda r: torch.dot(r, r))(torch.where(c.small, 0.0, c.rel))),
    "n_big": Accumulator("sum", lambda c: (c.finite & ~c.small).sum(dtype=c.a.dtype)),
    "dot": Accumulator("sum", lambda c: torch.dot(c.a, c.b)),
    "a_sq": Accumulator("sum", lambda c: torch.dot(c.a, c.a)),
    "b_sq": Accumulator("sum", lambda c: torch.dot(c.b, c.b)),
    "ulp_max": Accumulator("max", lambda c: c.ulp.max() if c.ulp.numel() else c.ulp.new_zeros(())),
    "ulp_sum": Accumulator("sum", lambda c: c.ulp.sum()),
    "ulp_gt1": Accumulator("sum", lambda c: (c.ulp > 1).sum(dtype=c.a.dtype)),
    "small_n": Accumulator("sum", lambda c: c.small.sum(dtype=c.a.dtype)),
    "small_err": Accumulator("sum", lambda c: (c.small & (c.absdiff > c.small_atol)).sum(dtype=c.a.dtype)),
    "small_max_abs": Accumulator("max", lambda c: (torch.where(c.small, c.absdiff, 0.0).max() if c.absdiff.numel()
                                                   else c.absdiff.new_zeros(()))),
    "rel_lt_1e-3": Accumulator("sum", lambda c: (c.finite & (c.rel < 1e-3)).sum(dtype=c.a.dtype)),
    "rel_lt_5e-3": Accumulator("sum", lambda c: (c.finite & (c.rel < 5e-3)).sum(dtype=c.a.dtype)),
    "mismatches": Accumulator("sum", lambda c: ((c.finite & (c.absdiff > c.atol + c.rtol * c.babs))
                                                 | c.nonfinite_mismatch).sum(dtype=c.a.dtype)),
    "bits_equal": Accumulator("sum", lambda c: (c.bits_equal.sum(dtype=c.a.dtype) if c.bits_equal is not None
                                                 else torch.tensor(-1.0, dtype=c.a.dtype, device=c.a.device))),
    # per octave of |b| (non-small, finite): element count and largest absolute error (within an octave
    # |b| varies by 2x at most; absolute errors there are identically distributed when they come from a sum)
    "octave_n": Accumulator("sum", _octave_n, OCTAVES),
    "octave_max_abs": Accumulator("max", _octave_max_abs, OCTAVES),
}


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def _cosine(acc: dict[str, float]) -> float:
    den = math.sqrt(acc["a_sq"]) * math.sqrt(acc["b_sq"])
    if den == 0:
        return 1.0 if acc["a_sq"] == acc["b_sq"] else 0.0
    return acc["dot"] / den


def _mean_rel_se(acc: dict[str, float]) -> float:
    n = acc["n_big"]
    if n < 2:
        return 0.0
    mean = acc["sum_rel"] / n
    var = max(acc["sq_rel"] / n - mean * mean, 0.0) * n / (n - 1)
    return math.sqrt(var / n)


# name -> (one-line definition, function of the reduced accumulators)
METRICS: dict[str, tuple[str, Callable[[dict[str, float]], float]]] = {
    "rmse": ("sqrt(mean((N-B)^2)) over finite positions", lambda a: math.sqrt(_ratio(a["sq_err"], a["n_finite"]))),
    "max_abs": ("max |N-B|", lambda a: a["max_abs"]),
    "max_rel": ("max |N-B|/(|B|+eps) over non-small |B| (msprobe MaxRelativeErr)", lambda a: a["max_rel"]),
    "mean_rel": ("mean |N-B|/(|B|+eps) over non-small |B| (msprobe MeanRelativeErr)",
                 lambda a: _ratio(a["sum_rel"], a["n_big"])),
    "mean_rel_se": ("standard error of mean_rel (spread of RE over non-small |B|, / sqrt(count))", _mean_rel_se),
    "cosine": ("sum(N*B)/(|N||B|) (msprobe Cosine)", _cosine),
    "ulp_max": ("max ULP distance, msprobe eb=max(floor(log2|B|),min_eb)", lambda a: a["ulp_max"]),
    "ulp_mean": ("mean ULP distance", lambda a: _ratio(a["ulp_sum"], a["n_finite"])),
    "ulp_gt1_ratio": ("share of elements more than 1 ULP away", lambda a: _ratio(a["ulp_gt1"], a["n_finite"])),
    "small_value_err_ratio": ("share of small |B| elements with |N-B| > small atol",
                              lambda a: _ratio(a["small_err"], a["small_n"])),
    "small_value_errors": ("count of small |B| elements with |N-B| > small atol", lambda a: a["small_err"]),
    "small_value_max_abs": ("max |N-B| over small |B| elements", lambda a: a["small_max_abs"]),
    "one_thousandth_ratio": ("share with RE < 0.001 (msprobe)", lambda a: _ratio(a["rel_lt_1e-3"], a["n_finite"])),
    "five_thousandth_ratio": ("share with RE < 0.005 (msprobe)", lambda a: _ratio(a["rel_lt_5e-3"], a["n_finite"])),
    "digits_lost": ("count of finite elements with RE >= 0.001", lambda a: a["n_finite"] - a["rel_lt_1e-3"]),
    "mismatches": ("elements outside atol + rtol*|B|, NaN/Inf disagreements included", lambda a: a["mismatches"]),
    "nonfinite_mismatches": ("positions where NaN/+Inf/-Inf differ", lambda a: a["nonfinite_mismatch"]),
    "actual_nonfinite": ("NaN/Inf count in N", lambda a: a["a_nonfinite"]),
    "expected_nonfinite": ("NaN/Inf count in B", lambda a: a["b_nonfinite"]),
    "expected_nan": ("NaN count in B", lambda a: a["b_nan"]),
    "numel": ("elements compared", lambda a: a["numel"]),
    "bitwise_equal": ("elements with identical bits (same dtype only, else -1)", lambda a: a["bits_equal"]),
}
# Per-octave values are flat scalar keys too (`octave_n.3`, `octave_max_abs.3`), so that a per-key worst of
# two eager runs stays per octave; JSON rows leave them out (OCTAVE_PREFIX).
OCTAVE_PREFIX = "octave_"


@dataclass
class Metrics:
    """Reduced metrics of one (actual, expected) pair. Access as attributes or via `.values`."""

    values: dict[str, float]

    def __getattr__(self, name: str) -> float:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def all_bitwise_equal(self) -> bool:
        return self.values["bitwise_equal"] == self.values["numel"]

    def octaves(self) -> dict[int, tuple[int, float]]:
        """Non-empty octaves: index (0 = just above the small-value threshold) -> (elements, max abs error)."""
        out = {}
        for i in range(OCTAVES):
            n = int(self.values.get(f"octave_n.{i}", 0))
            if n:
                out[i] = (n, self.values[f"octave_max_abs.{i}"])
        return out

    def summary(self) -> dict[str, float]:
        """The scalar metrics, without the per-octave entries (for reports and JSON)."""
        return {k: v for k, v in self.values.items() if not k.startswith(OCTAVE_PREFIX)}


def classify_nonfinite(x: torch.Tensor) -> torch.Tensor:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf."""
    return (torch.isnan(x).to(torch.int8) + 2 * (x == math.inf).to(torch.int8) + 3 * (x == -math.inf).to(torch.int8))


def _bits(x: torch.Tensor) -> torch.Tensor:
    int_view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return x.view(int_view[x.element_size()]) if x.is_floating_point() else x


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


class ChunkCache:
    """The per-tensor work of one aligned chunk, done once however many pairs use the tensor: the upcast,
    the finite mask, and (for the expected side) |b|, its ULP exponent and the small-value mask."""

    def __init__(self, raws: list[torch.Tensor], device: torch.device, acc: torch.dtype):
        self.raws = [r.to(device) for r in raws]
        self.acc = acc
        self._up: dict[int, torch.Tensor] = {}
        self._finite: dict[int, torch.Tensor] = {}
        self._expected: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def up(self, i: int) -> torch.Tensor:
        if i not in self._up:
            self._up[i] = self.raws[i].to(self.acc)
        return self._up[i]

    def finite(self, i: int) -> torch.Tensor:
        if i not in self._finite:
            self._finite[i] = torch.isfinite(self.up(i))
        return self._finite[i]

    def expected(self, i: int, min_eb: int) -> tuple[torch.Tensor, torch.Tensor]:
        """|b| and eb = max(floor(log2|b|), min_eb) for an all-finite expected chunk."""
        key = (i, min_eb)
        if key not in self._expected:
            babs = self.up(i).abs()
            self._expected[key] = babs, _ulp_exponent(babs, min_eb)
        return self._expected[key]


def _ulp_exponent(babs: torch.Tensor, min_eb: int) -> torch.Tensor:
    # frexp: |b| = m * 2^e with m in [0.5, 1), so floor(log2|b|) = e - 1 (and b == 0 -> min_eb)
    exponent = torch.frexp(babs).exponent
    return torch.where(babs > 0, exponent - 1, min_eb).clamp_(min=min_eb)


def make_chunk(cache: ChunkCache, ia: int, ib: int, *, ulp_dtype: torch.dtype, rtol: float, atol: float,
               small_threshold: float, small_atol: float) -> Chunk:
    a_raw, b_raw = cache.raws[ia], cache.raws[ib]
    bits_equal = (_bits(a_raw) == _bits(b_raw)) if a_raw.dtype == b_raw.dtype else None
    a, b = cache.up(ia), cache.up(ib)
    mant, min_eb = ulp_format(ulp_dtype)
    finite = cache.finite(ia) & cache.finite(ib)
    if bool(finite.all()):  # the common case: no NaN/Inf, skip the masking passes and share b's work
        af, bf = a, b
        nonfinite_mismatch = torch.zeros_like(finite)
        babs, eb = cache.expected(ib, min_eb)
    else:
        af, bf = torch.where(finite, a, 0), torch.where(finite, b, 0)
        nonfinite_mismatch = classify_nonfinite(a) != classify_nonfinite(b)
        babs = bf.abs()
        eb = _ulp_exponent(babs, min_eb)
    absdiff = (af - bf).abs_()
    rel = absdiff / (babs + EPS)
    # ldexp(0, 1074) would be 0 * inf = NaN for fp64: zero differences are zero ULP
    ulp = torch.where(absdiff > 0, torch.ldexp(absdiff, (mant - eb).to(cache.acc)), 0.0)
    return Chunk(af, bf, finite, absdiff, babs, rel, ulp, finite & (babs < small_threshold),
                 nonfinite_mismatch, bits_equal, rtol, atol, small_atol, a, b, _octave_index(babs, small_threshold))


def octave_base(small_threshold: float) -> int:
    """Exponent of octave 0: floor(log2(small-value threshold)), -1074 (fp64's least) when it is 0."""
    return math.frexp(small_threshold)[1] - 1 if small_threshold > 0 else -1074


def _octave_index(babs: torch.Tensor, small_threshold: float) -> torch.Tensor:
    exponent = torch.frexp(babs).exponent.to(torch.int64) - 1  # floor(log2|b|); |b| = 0 lands in octave 0
    return (exponent - octave_base(small_threshold)).clamp_(0, OCTAVES - 1)


def reduce_accumulators(partials: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Combine per-chunk accumulator scalars with one device->host transfer."""
    names = list(ACCUMULATORS)
    if not partials:
        return {n: (0.0 if ACCUMULATORS[n].size == 1 else [0.0] * ACCUMULATORS[n].size) for n in names}
    stacked = torch.stack([torch.cat([p[n].reshape(-1) for n in names]) for p in partials])  # chunks x entries
    out, start = [], 0
    for n in names:
        cols = stacked[:, start:start + ACCUMULATORS[n].size]
        start += ACCUMULATORS[n].size
        out.append(cols.sum(0) if ACCUMULATORS[n].combine == "sum" else cols.amax(0))
    flat = torch.cat(out).cpu().tolist()
    reduced, start = {}, 0
    for n in names:
        size = ACCUMULATORS[n].size
        reduced[n] = flat[start] if size == 1 else flat[start:start + size]
        start += size
    if partials[0]["bits_equal"].item() < 0:
        reduced["bits_equal"] = -1.0
    return reduced


def finalize(reduced: dict) -> Metrics:
    values = {name: float(fn(reduced)) for name, (_, fn) in METRICS.items()}
    for name, acc in ACCUMULATORS.items():
        if acc.size > 1:
            values.update({f"{name}.{i}": float(v) for i, v in enumerate(reduced[name])})
    return Metrics(values)


def pair_metrics(actual: torch.Tensor, expected: torch.Tensor, *, ulp_dtype: torch.dtype | None = None,
                 rtol: float = 0.0, atol: float = 0.0, small_threshold: float = 2.0**-20,
                 small_atol: float | None = None, chunk_elems: int = DEFAULT_CHUNK_ELEMS) -> Metrics:
    """Metrics of one pair (same shape). For several pairs over the same data use `multi_pair_metrics`."""
    return multi_pair_metrics({"pair": (actual, expected)}, ulp_dtype=ulp_dtype or actual.dtype, rtol=rtol,
                              atol=atol, small_threshold=small_threshold, small_atol=small_atol,
                              chunk_elems=chunk_elems)["pair"]


def multi_pair_metrics(pairs: dict[str, tuple[torch.Tensor, torch.Tensor]], *, ulp_dtype: torch.dtype,
                       rtol: float, atol: float, small_threshold: float, small_atol: float | None = None,
                       chunk_elems: int = DEFAULT_CHUNK_ELEMS) -> dict[str, Metrics]:
    """Metrics for several same-shape pairs in one walk over the data (each tensor chunk is read once)."""
    tensors: list[torch.Tensor] = []
    index: dict[int, int] = {}
    for a, b in pairs.values():
        for t in (a, b):
            if id(t) not in index:
                index[id(t)] = len(tensors)
                tensors.append(t)
    device = next(iter(pairs.values()))[0].device
    acc = accum_dtype(device)
    small_atol = atol if small_atol is None else small_atol
    partials: dict[str, list[dict[str, torch.Tensor]]] = {k: [] for k in pairs}
    with torch.no_grad():
        for chunk in iter_aligned_chunks(tensors, chunk_elems):
            cache = ChunkCache(chunk, device, acc)
            for key, (a, b) in pairs.items():
                c = make_chunk(cache, index[id(a)], index[id(b)], ulp_dtype=ulp_dtype, rtol=rtol, atol=atol,
                               small_threshold=small_threshold, small_atol=small_atol)
                partials[key].append({n: e.fn(c).to(acc) for n, e in ACCUMULATORS.items()})
    return {k: finalize(reduce_accumulators(v)) for k, v in partials.items()}


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> int:
    """Number of elements with identical bits (NaN payloads included); -1 when dtypes or shapes differ."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return -1
    return int((_bits(a) == _bits(b.to(a.device))).sum())


def finite_abs_max(t: torch.Tensor, chunk_elems: int = DEFAULT_CHUNK_ELEMS) -> float:
    """Largest |x| over the finite elements of a floating tensor, read in chunks (0.0 when none)."""
    best = 0.0
    with torch.no_grad():
        for (c,) in iter_aligned_chunks([t], chunk_elems):
            if c.numel():
                best = max(best, float(torch.where(torch.isfinite(c), c, 0).abs().max()))
    return best
