"""Chunked, single-pass error metrics between two tensors, computed on the tensors' own device.

Why chunked: a 1 GiB pair upcast to fp64 whole would allocate several GiB. Each chunk is upcast once,
all accumulators are updated from it, and the scalars stay on the device until one final transfer.
Definitions follow msprobe where they overlap (RE = |N-B| / (|B| + eps), cosine, max abs, max rel,
one/five-thousandth ratios, ULP with eb = max(floor(log2|B|), min_eb), NaN/Inf at the same positions
excluded), so Ascend users read familiar numbers.

The accumulators and the derived metrics are registries (`ACCUMULATORS`, `METRICS`): adding a metric is
one entry, not a new branch. An accumulator is a per-chunk reduction to a scalar or, for the magnitude
octaves, to a fixed-size vector (one entry per octave), combined across chunks by sum or max. All of them,
for all pairs, come from one read of each chunk (a comparison core: `cores/`).
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Callable

import torch

from fusecheck.compare.accumulators import (  # noqa: F401  (re-exported: the metrics' vocabulary)
    ACCUMULATORS, DEFAULT_CHUNK_ELEMS, EPS, OCTAVES, Accumulator, iter_aligned_chunks)

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


def _scale_error(acc: dict[str, float]) -> float:
    """|sum(N B) / sum(B^2) - 1|: the least-squares slope of N - B on B, N's systematic scale against B."""
    return abs(acc["dot"] - acc["b_sq"]) / acc["b_sq"] if acc["b_sq"] > 0 else 0.0


def _scale_error_unit_se(acc: dict[str, float]) -> float:
    """sqrt(sum (N-B)^2) / sum(B^2): times the largest |B|, a bound on scale_error's standard error when the
    element errors are independent (each one's weight in the slope is its |B| / sum(B^2))."""
    return math.sqrt(acc["sq_err"]) / acc["b_sq"] if acc["b_sq"] > 0 else 0.0


def _offset_error(acc: dict[str, float]) -> float:
    """|mean(N-B)| / rms(B): N's constant offset against B, in units of B's typical magnitude."""
    den = math.sqrt(acc["n_finite"] * acc["b_sq"])
    return abs(acc["sum_err"]) / den if den > 0 else 0.0


def _offset_error_se(acc: dict[str, float]) -> float:
    """sqrt(sum (N-B)^2 / (n sum B^2)): offset_error's standard error when the element errors are independent
    (the mean of n errors of second moment sum (N-B)^2 / n, over rms(B))."""
    den = acc["n_finite"] * acc["b_sq"]
    return math.sqrt(acc["sq_err"] / den) if den > 0 else 0.0


# name -> (one-line definition, function of the reduced accumulators)
METRICS: dict[str, tuple[str, Callable[[dict[str, float]], float]]] = {
    "rmse": ("sqrt(mean((N-B)^2)) over finite positions", lambda a: math.sqrt(_ratio(a["sq_err"], a["n_finite"]))),
    "max_abs": ("max |N-B|", lambda a: a["max_abs"]),
    "max_rel": ("max |N-B|/(|B|+eps) over non-small |B| (msprobe MaxRelativeErr)", lambda a: a["max_rel"]),
    "mean_rel": ("mean |N-B|/(|B|+eps) over non-small |B| (msprobe MeanRelativeErr)",
                 lambda a: _ratio(a["sum_rel"], a["n_big"])),
    "mean_rel_se": ("standard error of mean_rel (spread of RE over non-small |B|, / sqrt(count))", _mean_rel_se),
    "cosine": ("sum(N*B)/(|N||B|) (msprobe Cosine)", _cosine),
    "scale_error": ("|sum(N*B)/sum(B^2) - 1|: N's systematic scale against B (least squares)", _scale_error),
    "scale_error_unit_se": ("sqrt(sum (N-B)^2)/sum(B^2): scale_error's standard error per unit of max |B|",
                            _scale_error_unit_se),
    "offset_error": ("|mean(N-B)|/rms(B): N's constant offset against B", _offset_error),
    "offset_error_se": ("sqrt(sum (N-B)^2/(n sum B^2)): offset_error's standard error", _offset_error_se),
    "ulp_max": ("max ULP distance, msprobe eb=max(floor(log2|B|),min_eb)", lambda a: a["ulp_max"]),
    "ulp_mean": ("mean ULP distance", lambda a: _ratio(a["ulp_sum"], a["n_finite"])),
    "ulp_gt1_ratio": ("share of elements more than 1 ULP away", lambda a: _ratio(a["ulp_gt1"], a["n_finite"])),
    "small_value_err_ratio": ("share of small |B| elements with |N-B| > small atol",
                              lambda a: _ratio(a["small_err"], a["small_n"])),
    "small_value_errors": ("count of small |B| elements with |N-B| > small atol", lambda a: a["small_err"]),
    "small_value_max_abs": ("max |N-B| over small |B| elements", lambda a: a["small_max_abs"]),
    "one_thousandth_ratio": ("share with RE < 0.001 (msprobe)", lambda a: _ratio(a["rel_lt_1e-3"], a["n_finite"])),
    "five_thousandth_ratio": ("share with RE < 0.005 (msprobe)", lambda a: _ratio(a["rel_lt_5e-3"], a["n_finite"])),
    "digits_lost": ("count of finite elements with RE >= 0.001, small |B| included (in fp32: 14 of 24 bits lost)",
                    lambda a: a["n_finite"] - a["rel_lt_1e-3"]),
    "mismatches": ("elements outside atol + rtol*|B|, NaN/Inf disagreements included", lambda a: a["mismatches"]),
    "nonfinite_mismatches": ("positions where NaN/+Inf/-Inf differ", lambda a: a["nonfinite_mismatch"]),
    "actual_nonfinite": ("NaN/Inf count in N", lambda a: a["a_nonfinite"]),
    "expected_nonfinite": ("NaN/Inf count in B", lambda a: a["b_nonfinite"]),
    "expected_nan": ("NaN count in B", lambda a: a["b_nan"]),
    "numel": ("elements compared", lambda a: a["numel"]),
    "bitwise_equal": ("elements with identical bits (same dtype only, else -1)", lambda a: a["bits_equal"]),
}
# the flat keys of the per-octave entries, made once (a compare finalizes three pairs of 80 each)
_VECTOR_KEYS = {name: [f"{name}.{i}" for i in range(acc.size)] for name, acc in ACCUMULATORS.items() if acc.size > 1}
_ZEROS = [0] * OCTAVES  # the default of an absent octave count


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
        """Non-empty octaves: index (0 = just above the small-value threshold) -> (elements, max abs error).
        Made once per Metrics (a verdict reads them three times; `values` is not changed after construction:
        a changed metric is a new Metrics)."""
        memo = self.__dict__.get("_octaves")
        if memo is None or memo[0] is not self.values:
            get, top = self.values.get, _VECTOR_KEYS["octave_max_abs"]
            memo = self.__dict__["_octaves"] = (self.values, {
                i: (int(n), self.values[top[i]])
                for i, n in enumerate(map(get, _VECTOR_KEYS["octave_n"], _ZEROS)) if n})
        return memo[1]

    def summary(self) -> dict[str, float]:
        """The scalar metrics, without the per-octave entries (for reports and JSON)."""
        return {k: v for k, v in self.values.items() if not k.startswith(OCTAVE_PREFIX)}


def classify_nonfinite(x: torch.Tensor) -> torch.Tensor:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf."""
    return (torch.isnan(x).to(torch.int8) + 2 * (x == math.inf).to(torch.int8) + 3 * (x == -math.inf).to(torch.int8))


def _bits(x: torch.Tensor) -> torch.Tensor:
    int_view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return x.view(int_view[x.element_size()]) if x.is_floating_point() else x


def octave_base(small_threshold: float) -> int:
    """Exponent of octave 0: floor(log2(small-value threshold)), -1074 (fp64's least) when it is 0."""
    return math.frexp(small_threshold)[1] - 1 if small_threshold > 0 else -1074


def pair_metrics(actual: torch.Tensor, expected: torch.Tensor, *, ulp_dtype: torch.dtype | None = None,
                 rtol: float = 0.0, atol: float = 0.0, small_threshold: float = 2.0**-20,
                 small_atol: float | None = None, chunk_elems: int | None = None) -> Metrics:
    """Metrics of one pair (same shape). For several pairs over the same data use `multi_pair_metrics`."""
    return multi_pair_metrics({"pair": (actual, expected)}, ulp_dtype=ulp_dtype or actual.dtype, rtol=rtol,
                              atol=atol, small_threshold=small_threshold, small_atol=small_atol,
                              chunk_elems=chunk_elems)["pair"]


def multi_pair_metrics(pairs: dict[str, tuple[torch.Tensor, torch.Tensor]], *, ulp_dtype: torch.dtype,
                       rtol: float, atol: float, small_threshold: float, small_atol: float | None = None,
                       chunk_elems: int | None = None) -> dict[str, Metrics]:
    """Metrics for several same-shape pairs in one walk over the data: each chunk of each distinct tensor
    is read once and reduced to every accumulator of every pair (by the first core of `cores.CORES` that
    answers)."""
    from fusecheck.compare import cores

    w = _Walk(pairs, ulp_dtype, rtol, atol, small_threshold, small_atol)
    with torch.no_grad():
        reduced = cores.walk(w.tensors, w.distinct, w.device, w.acc, w.fparams, w.iparams, chunk_elems)
    return w.metrics(reduced)


def multi_pair_metrics_at_scale(pairs: dict[str, tuple[torch.Tensor, torch.Tensor]], scale_of: list[torch.Tensor],
                                *, ulp_dtype: torch.dtype, rtol: float, atol: float, small_threshold: float
                                ) -> tuple[dict[str, Metrics], float, list[float]] | None:
    """multi_pair_metrics under thresholds scaled by the largest finite |x| of `scale_of` (tensors among the
    pairs'), where a core derives them on the device in the same launch sequence (cores.walk_at_scale):
    (metrics, the scale, the derived atol, small threshold, small_atol and octave base), or None."""
    from fusecheck.compare import cores

    w = _Walk(pairs, ulp_dtype, rtol, atol, small_threshold, None)
    if any(id(t) not in w.index for t in scale_of):
        return None
    scale_idx = tuple(w.index[id(t)] for t in scale_of)
    if any(w.tensors[i] is not t for i, t in zip(scale_idx, scale_of)):
        return None  # moved to the host (small): the host path answers without a wait anyway
    with torch.no_grad():
        got = cores.walk_at_scale(w.tensors, w.distinct, w.device, w.acc, w.fparams, w.iparams, scale_idx)
    if got is None:
        return None
    reduced, scale, derived = got
    return w.metrics(reduced), scale, derived


class _Walk:
    """One walk's inputs: the distinct tensors of the pairs (small ones moved to the host), which pairs read
    which, the accumulation dtype and the thresholds as tensors (one core serves every scale)."""

    def __init__(self, pairs, ulp_dtype, rtol, atol, small_threshold, small_atol):
        from fusecheck.compare.cores.torch_core import params
        from fusecheck.compare.host import to_host

        self.pairs = pairs
        tensors: list[torch.Tensor] = []
        self.index: dict[int, int] = {}
        for a, b in pairs.values():
            for t in (a, b):
                if id(t) not in self.index:
                    self.index[id(t)] = len(tensors)
                    tensors.append(t)
        self.tensors = list(to_host(*tensors))  # small ones on an accelerator: cheaper on the host than any launch
        self.device = self.tensors[0].device
        self.acc = accum_dtype(self.device)
        mant, min_eb = ulp_format(ulp_dtype)
        self.fparams, self.iparams = params(self.acc, mant=mant, min_eb=min_eb, rtol=rtol, atol=atol,
                                            small_threshold=small_threshold,
                                            small_atol=atol if small_atol is None else small_atol,
                                            octave_base=octave_base(small_threshold))
        self.order = tuple((self.index[id(a)], self.index[id(b)]) for a, b in pairs.values())
        self.distinct = tuple(dict.fromkeys(self.order))  # compare(x, x, golden) asks for (x, golden) twice: walk it once

    def metrics(self, reduced: torch.Tensor | None) -> dict[str, Metrics]:
        if reduced is None:  # no elements
            return {k: _finalize_row([0.0] * ROW_WIDTH) for k in self.pairs}
        rows = dict(zip(self.distinct, reduced.cpu().tolist()))  # the one device->host transfer
        return {k: _finalize_row(rows[o]) for k, o in zip(self.pairs, self.order)}


def _row_layout() -> tuple[list[tuple[str, int]], list[tuple[list[str], int, int]]]:
    """Where each accumulator lies in a flat row (`ACCUMULATORS` order): (name, index) of the scalars, (flat
    keys, start, stop) of the per-octave vectors. Made once: a compare finalizes three rows of ~100 entries,
    and on an accelerator this host work is part of every call's fixed cost (issue 22)."""
    scalars, vectors, start = [], [], 0
    for name, acc in ACCUMULATORS.items():
        if acc.size == 1:
            scalars.append((name, start))
        else:
            vectors.append((_VECTOR_KEYS[name], start, start + acc.size))
        start += acc.size
    return scalars, vectors


_SCALAR_AT, _VECTOR_AT = _row_layout()
ROW_WIDTH = sum(a.size for a in ACCUMULATORS.values())
_METRIC_FNS = [(name, fn) for name, (_, fn) in METRICS.items()]


def _finalize_row(row: list[float]) -> Metrics:
    """The metrics of one flat row of reduced entries (`ACCUMULATORS` order): every METRICS value, and the
    per-octave entries as flat keys."""
    acc = {name: row[i] for name, i in _SCALAR_AT}
    if acc["bits_equal"] < 0:  # -1 per chunk: the dtypes differ
        acc["bits_equal"] = -1.0
    values = {name: float(fn(acc)) for name, fn in _METRIC_FNS}
    for keys, start, stop in _VECTOR_AT:
        values.update(zip(keys, map(float, row[start:stop])))
    return Metrics(values)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> int:
    """Number of elements with identical bits (NaN payloads included); -1 when dtypes or shapes differ."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return -1
    return int((_bits(a) == _bits(b.to(a.device))).sum())
