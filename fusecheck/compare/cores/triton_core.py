"""The one-pass comparison core as one hand-written Triton kernel (CUDA; Triton's interpreter on CPU in tests).

Why: Inductor lowers `torch_core.chunk_partials` to one loop per pair plus aten scatters for the per-octave
maxima (10 GB/s on the H200). Here one grid of programs reads result, eager and golden once, upcasts them in
registers and keeps every accumulator of every pair as a per-lane register vector (the loop reduces one
flag per tile, nothing else); each program writes its partials and a small torch reduction over programs
finishes. Definitions are `torch_core._pair`'s, element by element, in the same fp64 arithmetic (correctly
rounded division, no FMA contraction), so counts and maxima are bit-identical and sums differ by summation
order only (tests/compare/test_compare_triton.py).

The per-octave statistics: counts are a `tl.histogram` per tile (one for the two pairs judged against the
same golden, corrected on the tiles where one of their A sides is NaN/Inf); the maxima keep a running 64-bin maximum
per program, and an element updates it only when its error beats its octave's current maximum (a
`tl.gather`). After the first tiles that is rare (a record in a stream of draws), so the per-octave loop
runs on the few record-setting tiles only, over the octaves present among their records.

That exact kernel takes only the tiles holding a NaN/Inf and the tail: every finite tile goes to the fast
pass (`triton_fast_kernel.py`, its docstring says why it is exact), which lists the others for it. The two
launches' per-program partials are reduced together. `FUSECHECK_TRITON_FAST=0` runs the exact kernel alone.

Registered in `cores.CORES` for CUDA for fp16/bf16/fp32/fp64 tensors; anything else, a
missing Triton, a failing compile or a first call that disagrees with the eager core (checked once per
variant on the data's prefix and on fixed data with every special value) falls back to the eager core with
one warning: never a false PASS. Tensors under MIN_ELEMS stay on the eager core.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import warnings

import torch

from fusecheck.compare.accumulators import (ACCUMULATORS, DEFAULT_CHUNK_ELEMS, EPS, OCTAVES, SUM_COLUMNS,
                                            iter_aligned_chunks)
from fusecheck.compare.cores import torch_core

OCT_BINS = 64  # a power of two >= OCTAVES (tl.histogram, tl.gather)
EXACT_LOG_BELOW = -1022  # an octave base below the normal range needs exact exponents of subnormals
# per pair, in the kernel's output order
COUNTS = ("n_finite", "nonfinite_mismatch", "ulp_gt1", "small_n", "small_err", "rel_ge_1e-3", "rel_ge_5e-3",
          "mismatches", "bits_equal")  # rel >= c implies a finite position: rel_lt_c = n_finite - rel_ge_c
SUMS = ("sq_err", "sum_rel", "sq_rel", "dot", "a_sq", "b_sq", "ulp_sum")
MAXES = ("max_abs", "max_rel", "ulp_max", "small_max_abs")
# per tensor: NaN/Inf and NaN counts (shared by the pairs that read the tensor)
TENSOR_COUNTS = ("nonfinite", "nan")
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# fp64 constants travel in a tensor: Triton types a Python float argument (and most literals) as fp32. After
# the relative-error thresholds and eps, for triton_fast_kernel: the bands around each threshold where its
# relative error (within 2^-51 of the correctly rounded one) could count otherwise (such lanes are divided
# exactly), the relative error beyond which d * r may overflow, the record below which its record bound is
# d > 0, and that bound's slack
NEAR = 2.0 ** -45
CONSTS = (1e-3, 5e-3, EPS, 1e-3 * (1 - NEAR), 1e-3 * (1 + NEAR), 5e-3 * (1 - NEAR), 5e-3 * (1 + NEAR),
          2.0 ** 1000, 2.0 ** -900, 1 - NEAR)

# Launch shape (benchmarks/triton_core.py sweeps it; FUSECHECK_TRITON_CONFIG="BLOCK,WARPS,PROGRAMS_PER_SM"
# overrides it): one element per thread and tile, so that every accumulator of three pairs fits one register
# (two for fp64) per thread (~230 registers on sm_90); one warp per program, so that the block-wide steps
# (histogram, gather, the records flag) need no cross-warp barrier: 631 SASS instructions per element
# against 680 with 4 warps (offline compile for sm_90, not yet timed), eight programs per SM
CONFIG_ENV = "FUSECHECK_TRITON_CONFIG"
DEFAULT_CONFIG = (32, 1, 8)


def _config() -> tuple[int, int, int]:
    text = os.environ.get(CONFIG_ENV, "")
    try:
        values = tuple(int(v) for v in text.split(",")) if text else DEFAULT_CONFIG
        if len(values) == 3 and min(values) > 0 and values[0] & (values[0] - 1) == 0:
            return values
    except ValueError:
        pass
    warnings.warn(f"fusecheck: {CONFIG_ENV}={text!r} is not BLOCK,WARPS,PROGRAMS_PER_SM (positive, BLOCK a "
                  f"power of two); using {DEFAULT_CONFIG}")
    return DEFAULT_CONFIG


BLOCK, NUM_WARPS, PROGRAMS_PER_SM = _config()
# the abs-max pre-pass: a plain streaming max, many elements per thread
ABS_MAX_BLOCK, ABS_MAX_WARPS, ABS_MAX_PROGRAMS_PER_SM = 2048, 8, 4
INTERPRET_PROGRAMS = 3  # the interpreter runs programs one by one: a few exercise the cross-program reduction
MAX_TILES_PER_PROGRAM = (1 << 16) - 1  # a lane's counts are 16-bit fields
CHECK_ELEMS = (1 << 16) + 3  # the self-check's prefix: several tiles and a partial one
# Smaller tensors stay on the eager core: it answers them in a few ms, and a run of small tensors (a small
# model's outputs and gradients) then compiles nothing (a Triton compile is seconds per dtype/pair variant,
# cached on disk after)
MIN_ELEMS = 1 << 16


@functools.lru_cache(maxsize=1)
def available() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def _kernels():
    """The jit functions (imported on first use: Triton is optional, and its interpreter is chosen when they
    are decorated, from TRITON_INTERPRET)."""
    from fusecheck.compare.cores import triton_kernels

    return triton_kernels.partials_kernel, triton_kernels.abs_max_kernel


def _fast_kernel():
    from fusecheck.compare.cores import triton_fast_kernel

    return triton_fast_kernel.fast_kernel


FAST_ENV = "FUSECHECK_TRITON_FAST"  # "0": the exact kernel takes every tile (no fast pass)


def fast_pass() -> bool:
    return os.environ.get(FAST_ENV, "1") != "0"


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _programs(n: int, device: torch.device, block: int, per_sm: int) -> int:
    """Programs to launch: `per_sm` per SM, at most one per tile, enough for 16-bit per-lane counts."""
    tiles = _cdiv(n, block)
    if device.type == "cuda":
        want = _sm_count(device.index if device.index is not None else torch.cuda.current_device()) * per_sm
    else:
        want = INTERPRET_PROGRAMS
    return max(1, min(tiles, max(want, _cdiv(tiles, MAX_TILES_PER_PROGRAM))))


def _on(device: torch.device):
    """Triton launches on the current CUDA device: make it the tensors' (a rank's cuda:N)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _launch_options(device: torch.device) -> dict:
    # no FMA contraction: `atol + rtol * |b|` must round as torch's two ops do (mismatch counts bit-identical)
    return {} if device.type != "cuda" else {"enable_fp_fusion": False}


def _ulp_safe(ints: tuple[int, int, int]) -> bool:
    """The fast kernel's ULP_SAFE: 2^(mant - eb) is finite for every eb >= min_eb, so 0 * scale is 0."""
    mant, min_eb, _ = ints
    return mant - min_eb <= 1023


def _outputs(progs: int, npairs: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """One launch's per-program partials: counts, tensor counts, sums, maxima, octave counts and maxima."""
    return (torch.empty(progs, npairs, len(COUNTS), dtype=torch.int32, device=device),
            torch.empty(progs, 3, len(TENSOR_COUNTS), dtype=torch.int32, device=device),
            torch.empty(progs, npairs, len(SUMS), dtype=torch.float64, device=device),
            torch.empty(progs, npairs, len(MAXES), dtype=torch.float64, device=device),
            torch.empty(progs, npairs, OCT_BINS, dtype=torch.int32, device=device),
            torch.empty(progs, npairs, OCT_BINS, dtype=torch.float64, device=device))


def _raw_partials(raws: list[torch.Tensor], pairs, fconsts: torch.Tensor, ints: tuple[int, int, int],
                  stats: dict | None = None) -> torch.Tensor:
    """[pairs, entries] (on the CPU) of one flat chunk (all on one device), entries in `ACCUMULATORS` order.
    With the fast pass on: the fast kernel over every tile, then the exact kernel over the tiles it listed;
    their per-program partials are reduced together (each tile counted once). `stats` (tests, benchmarks)
    receives the number of tiles and of listed tiles."""
    exact, _ = _kernels()
    device, n = raws[0].device, raws[0].numel()
    progs = _programs(n, device, BLOCK, PROGRAMS_PER_SM)
    tiles_per_prog = _cdiv(_cdiv(n, BLOCK), progs)
    npairs = len(pairs)
    xs = list(raws) + [raws[-1]] * (3 - len(raws))
    spec = []
    for ia, ib in list(pairs) + [pairs[0]] * (3 - npairs):
        spec += [ia, ib, raws[ia].dtype == raws[ib].dtype]
    shape = (len(raws), npairs, *spec, BLOCK, OCTAVES, OCT_BINS, len(COUNTS), ints[2] < EXACT_LOG_BELOW)
    options = dict(num_warps=NUM_WARPS, **_launch_options(device))
    fast = fast_pass()
    # both launches' per-program rows in one set of outputs (the fast kernel's first): reduced together below
    outputs = _outputs(progs * (1 + fast), npairs, device)
    with _on(device):
        if fast:
            listed = torch.empty(progs * tiles_per_prog, dtype=torch.int32, device=device)
            count = torch.empty(progs, dtype=torch.int32, device=device)
            _fast_kernel()[(progs,)](*xs, n, fconsts, *ints, tiles_per_prog, *(o[:progs] for o in outputs), listed,
                                     count, *shape, _ulp_safe(ints), **options)
        else:
            listed = count = torch.empty(1, dtype=torch.int32, device=device)
        exact[(progs,)](*xs, n, fconsts, *ints, tiles_per_prog, *(o[-progs:] for o in outputs), listed, count,
                        *shape, fast, **options)
    if stats is not None:
        stats.update(tiles=_cdiv(n, BLOCK), listed=int(count.sum()) if fast else None)
    cnt, tcnt, sums, maxes, hist, omax = outputs
    # reduced over programs on the device (one sum per accumulator type: each launch costs as much as the
    # kernels at a million elements), one transfer, then the entries assembled from Python floats on the host
    rows = cnt.shape[0]
    counts = torch.cat([cnt.view(rows, -1), tcnt.view(rows, -1), hist[:, :, :OCTAVES].reshape(rows, -1)], 1)
    counts = counts.sum(0, dtype=torch.int64).double()
    highs = torch.cat([maxes.view(rows, -1), omax[:, :, :OCTAVES].reshape(rows, -1)], 1).amax(0)
    c, t, m = npairs * len(COUNTS), 3 * len(TENSOR_COUNTS), npairs * len(MAXES)
    flat = torch.cat([counts, sums.view(rows, -1).sum(0), highs]).tolist()
    nc = c + t + npairs * OCTAVES  # back in _Parts' order: counts, tensor counts, sums, maxima, octave n, max
    ns = npairs * len(SUMS)
    reduced = flat[:c + t] + flat[nc:nc + ns] + flat[nc + ns:nc + ns + m] + flat[c + t:nc] + flat[nc + ns + m:]
    parts = _Parts(n, pairs, raws, reduced, npairs)
    return torch.tensor([[v for name in ACCUMULATORS for v in _values(ENTRIES[name](parts, p))]
                         for p in range(npairs)], dtype=torch.float64)


def _values(entry) -> list[float]:
    return entry if isinstance(entry, list) else [entry]


class _Parts:
    """The reduced kernel outputs of one chunk as Python floats, looked up by name (ENTRIES)."""

    def __init__(self, n, pairs, raws, flat: list[float], npairs: int):
        self.n, self.pairs, self.raws = n, pairs, raws
        sizes = {"cnt": npairs * len(COUNTS), "tcnt": 3 * len(TENSOR_COUNTS), "sums": npairs * len(SUMS),
                 "maxes": npairs * len(MAXES), "hist": npairs * OCTAVES, "omax": npairs * OCTAVES}
        start = 0
        for kind, size in sizes.items():
            setattr(self, kind, flat[start:start + size])
            start += size

    def at(self, kind: str, row: int, col: int, width: int) -> float:
        return getattr(self, kind)[row * width + col]

    def count(self, p, name):
        return self.at("cnt", p, COUNTS.index(name), len(COUNTS))

    def tensor(self, p, side, name):
        return self.at("tcnt", self.pairs[p][side], TENSOR_COUNTS.index(name), len(TENSOR_COUNTS))

    def octaves(self, kind, p):
        return getattr(self, kind)[p * OCTAVES:(p + 1) * OCTAVES]


def _from(kind: str, table: tuple):
    def get(parts: _Parts, p: int, name: str) -> float:
        return parts.at(kind, p, table.index(name), len(table))
    return get


def _named(get, name):
    return lambda parts, p: get(parts, p, name)


# accumulator -> its value (a float, or a list of floats per octave) for pair p from the reduced kernel
# outputs (every ACCUMULATORS name: a KeyError names one that is missing)
ENTRIES = {
    **{name: _named(_from("cnt", COUNTS), name) for name in COUNTS if name in ACCUMULATORS and name != "bits_equal"},
    **{name: _named(_from("sums", SUMS), name) for name in SUMS},
    **{name: _named(_from("maxes", MAXES), name) for name in MAXES},
    "numel": lambda parts, p: float(parts.n),
    "a_nonfinite": lambda parts, p: parts.tensor(p, 0, "nonfinite"),
    "b_nonfinite": lambda parts, p: parts.tensor(p, 1, "nonfinite"),
    "b_nan": lambda parts, p: parts.tensor(p, 1, "nan"),
    "n_big": lambda parts, p: parts.count(p, "n_finite") - parts.count(p, "small_n"),
    "rel_lt_1e-3": lambda parts, p: parts.count(p, "n_finite") - parts.count(p, "rel_ge_1e-3"),
    "rel_lt_5e-3": lambda parts, p: parts.count(p, "n_finite") - parts.count(p, "rel_ge_5e-3"),
    "bits_equal": lambda parts, p: (parts.count(p, "bits_equal")
                                    if parts.raws[parts.pairs[p][0]].dtype == parts.raws[parts.pairs[p][1]].dtype
                                    else -1.0),
    "octave_n": lambda parts, p: parts.octaves("hist", p),
    "octave_max_abs": lambda parts, p: parts.octaves("omax", p),
}


def _fconsts(fparams: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The kernel's fp64 parameters on `device`, kept per (values, device): a host-to-device copy from
    pageable memory waits for the stream, once per distinct tolerance instead of once per call."""
    return _fconsts_on(tuple(fparams.to(torch.float64).tolist()), device)


@functools.lru_cache(maxsize=256)
def _fconsts_on(values: tuple[float, ...], device: torch.device) -> torch.Tensor:
    return torch.tensor(values + CONSTS, dtype=torch.float64).to(device)


# entries that are fp64 sums (summation order may differ); every other entry (counts, maxima) must be equal
FLOAT_SUM_COLUMNS = torch.tensor([name in SUMS for name, a in ACCUMULATORS.items() for _ in range(a.size)])
SUM_RTOL = 1e-9

_failed: set = set()  # variants that failed (compile error or self-check): the eager core answers
_checked: set = set()


ENV = "FUSECHECK_TRITON_COMPARE"  # "0": off (the eager or Inductor core answers); on by default where it runs


def supports(tensors: list[torch.Tensor], acc: torch.dtype) -> bool:
    return (os.environ.get(ENV, "1") != "0" and acc == torch.float64 and all(t.dtype in DTYPES for t in tensors)
            and available() and not torch.compiler.is_compiling())


def _self_check(raws, pairs, fconsts, ints, fparams, iparams) -> bool:
    """The kernel against the eager core on a prefix of the data and on `_specimen` (counts and maxima
    exact, sums to 1e-9)."""
    prefix = [r[:CHECK_ELEMS] for r in raws]
    specimen = _specimen(raws, float(fparams[2]))
    return all(_agrees(x, pairs, fconsts, ints, fparams, iparams) for x in (prefix, specimen))


def _specimen(raws: list[torch.Tensor], small_threshold: float) -> list[torch.Tensor]:
    """Fixed data on every path of the kernel, in the variant's dtypes and on its device: NaN, +-Inf (also on
    one side only), +-0, subnormals, values at and around the small-value threshold, 80 octaves, ties and
    exact equality, four tiles per program. Checked with the data's prefix on the first call, so that a
    kernel broken on a path the first data never takes is caught before such data arrives."""
    device = raws[0].device
    programs = INTERPRET_PROGRAMS if device.type != "cuda" else _sm_count(
        device.index if device.index is not None else torch.cuda.current_device()) * PROGRAMS_PER_SM
    n = 4 * BLOCK * programs + 5
    gen = torch.Generator().manual_seed(12)

    def noise(scale):
        return 1 + scale * torch.randn(n, dtype=torch.float64, generator=gen)
    g = torch.randn(n, dtype=torch.float64, generator=gen) * torch.exp2(
        torch.randint(-60, 20, (n,), generator=gen).double())
    t = small_threshold
    special = torch.tensor([0.0, -0.0, 5e-324, -5e-324, 2.0 ** -1022, 1e-30, t, -t, 0.75 * t, 1.5 * t, 1.0, 3.0,
                            3.0, math.nan, math.inf, -math.inf, 1e300, -1e300], dtype=torch.float64)
    g[:7 * len(special):7] = special
    e = g * noise(1e-3)
    e[5::11] = g[5::11]  # equal to the golden
    e[3::97] = math.nan  # NaN in eager only
    r = g * noise(1e-2)
    r[2::13] = e[2::13]  # bitwise equal to eager
    r[9::89] = math.inf  # Inf, NaN in the result only
    r[13::83] = math.nan
    base = [r, e, g]
    return [base[min(i, 2)].to(x.dtype).to(device) for i, x in enumerate(raws)]


def _agrees(raws, pairs, fconsts, ints, fparams, iparams) -> bool:

    got = _raw_partials(raws, pairs, fconsts, ints)
    want = torch_core.chunk_partials(raws, pairs, torch.float64, fparams.to(raws[0].device),
                                iparams.to(raws[0].device)).cpu()
    exact = (got == want) | (got.isnan() & want.isnan())
    close = torch.isclose(got, want, rtol=SUM_RTOL, atol=0.0, equal_nan=True)
    # sum(N*B) alone has terms of both signs: its rounding is bounded by |N||B| (Cauchy-Schwarz), not by itself
    dot, a_sq, b_sq = (_column(name) for name in ("dot", "a_sq", "b_sq"))
    close[:, dot] |= (got[:, dot] - want[:, dot]).abs() <= SUM_RTOL * (want[:, a_sq] * want[:, b_sq]).sqrt()
    return bool(torch.where(FLOAT_SUM_COLUMNS, close, exact).all())


def _column(name: str) -> int:
    names = [n for n, a in ACCUMULATORS.items() for _ in range(a.size)]
    return names.index(name)


def walk(tensors: list[torch.Tensor], pairs: tuple[tuple[int, int], ...], device: torch.device,
         acc: torch.dtype, fparams: torch.Tensor, iparams: torch.Tensor) -> torch.Tensor | None:
    """The cores' protocol (cores/__init__.py) through the kernel: [pairs, entries] (on the CPU: reduced on
    the device, then one transfer per chunk), or None where another core must answer (unsupported dtypes, no
    Triton, a variant that failed). On-device contiguous tensors go in one launch; others in
    DEFAULT_CHUNK_ELEMS chunks moved to `device` (memory bounded by the chunk)."""
    if (tensors[0].numel() < max(MIN_ELEMS, 1) or len(tensors) > 3 or len(pairs) > 3 or not supports(tensors, acc)
            or min(fparams.tolist()) < 0):
        return None  # the kernel reads up to 3 tensors; "a difference beyond atol implies finite" needs atol >= 0
    ints = tuple(int(v) for v in iparams.tolist())
    variant = (device.type, tuple(t.dtype for t in tensors), pairs, ints[2] < EXACT_LOG_BELOW, fast_pass(),
               _ulp_safe(ints))  # one compile (and one self-check) each
    if variant in _failed:
        return None
    whole = all(t.device == device and t.is_contiguous() for t in tensors)
    size = tensors[0].numel() if whole else DEFAULT_CHUNK_ELEMS
    fconsts = _fconsts(fparams, device)
    sums, maxes = None, None
    try:
        for chunk in iter_aligned_chunks(tensors, size):
            raws = [c.to(device) for c in chunk]
            if not raws[0].numel():
                continue
            if variant not in _checked:
                if not _self_check(raws, pairs, fconsts, ints, fparams, iparams):
                    warnings.warn("fusecheck: the Triton comparison kernel disagreed with the eager core; using eager")
                    _failed.add(variant)
                    return None
                _checked.add(variant)
            out = _raw_partials(raws, pairs, fconsts, ints)
            sums = out if sums is None else sums + out
            maxes = out if maxes is None else torch.maximum(maxes, out)
    except Exception as e:  # a compile error, an unsupported GPU: the eager core still answers
        warnings.warn(f"fusecheck: Triton comparison kernel unavailable ({type(e).__name__}: {e}); using eager")
        _failed.add(variant)
        return None
    if sums is None:
        return None
    return torch.where(SUM_COLUMNS, sums, maxes)


def _abs_max(xs: list[torch.Tensor]) -> float:
    _, kernel = _kernels()
    n, device = xs[0].numel(), xs[0].device
    block = ABS_MAX_BLOCK if device.type == "cuda" else BLOCK
    progs = _programs(n, device, block, ABS_MAX_PROGRAMS_PER_SM)
    out = torch.empty(progs, dtype=torch.float64, device=device)
    with _on(device):
        kernel[(progs,)](xs[0], xs[-1], n, _cdiv(_cdiv(n, block), progs), out, len(xs), block,
                         num_warps=ABS_MAX_WARPS)
    return float(out.max())


def finite_abs_max(tensors: list[torch.Tensor]) -> float | None:
    """Largest finite |x| over one or two same-shape floating tensors in one launch; None where the kernel
    cannot answer (the caller's torch walk then does). The first call per variant is checked against torch
    on a prefix."""
    if not 1 <= len(tensors) <= 2 or not supports(tensors, torch.float64) or tensors[0].numel() < max(MIN_ELEMS, 1):
        return None
    device = tensors[0].device
    if not all(t.device == device and t.is_contiguous() for t in tensors):
        return None
    variant = ("abs_max", device.type, tuple(t.dtype for t in tensors))
    if variant in _failed:
        return None
    xs = [t.reshape(-1) for t in tensors]
    try:
        if variant not in _checked:
            prefix = [x[:CHECK_ELEMS] for x in xs]
            want = max(float(torch.where(torch.isfinite(x), x.abs(), 0).amax()) for x in prefix)
            if _abs_max(prefix) != want:
                warnings.warn("fusecheck: the Triton abs-max kernel disagreed with torch; using torch")
                _failed.add(variant)
                return None
            _checked.add(variant)
        return _abs_max(xs)
    except Exception as e:
        warnings.warn(f"fusecheck: Triton abs-max kernel unavailable ({type(e).__name__}: {e}); using torch")
        _failed.add(variant)
        return None
