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
import threading
import warnings

import numpy
import torch

from fusecheck.compare.accumulators import (ACCUMULATORS, COLUMNS, DEFAULT_CHUNK_ELEMS, EPS, OCTAVES,
                                            SUM_COLUMNS, iter_aligned_chunks, rows_agree)
from fusecheck.compare.cores import torch_core

OCT_BINS = 64  # a power of two >= OCTAVES (tl.histogram, tl.gather)
EXACT_LOG_BELOW = -1022  # an octave base below the normal range needs exact exponents of subnormals
# per pair, in the kernel's output order
COUNTS = ("n_finite", "nonfinite_mismatch", "ulp_gt1", "small_n", "small_err", "rel_ge_1e-3", "rel_ge_5e-3",
          "mismatches", "bits_equal")  # rel >= c implies a finite position: rel_lt_c = n_finite - rel_ge_c
SUMS = ("sq_err", "sum_rel", "sq_rel", "dot", "a_sq", "b_sq", "ulp_sum", "sum_err")
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
# the reduction over programs: columns per program, rows per step (a few dozen programs, ~17 steps at
# 8 programs per SM on the H100)
FINISH_COLS, FINISH_ROWS, FINISH_WARPS = 16, 128, 4
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


def _finish_kernel():
    from fusecheck.compare.cores import triton_kernels

    return triton_kernels.finish_kernel


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
    """Triton launches on the current CUDA device: make it the tensors' (a rank's cuda:N), where it is not."""
    if device.type != "cuda" or device.index is None or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def _launch_options(device: torch.device) -> dict:
    # no FMA contraction: `atol + rtol * |b|` must round as torch's two ops do (mismatch counts bit-identical)
    return {} if device.type != "cuda" else {"enable_fp_fusion": False}


def _ulp_safe(ints: tuple[int, int, int]) -> bool:
    """The fast kernel's ULP_SAFE: 2^(mant - eb) is finite for every eb >= min_eb, so 0 * scale is 0."""
    mant, min_eb, _ = ints
    return mant - min_eb <= 1023


# Triton's launch path binds and specialises every argument on every call: about 40 us of host time per
# launch of these kernels (~45 arguments) on the H100's host, more than the kernels take at a million elements
# (benchmarks/compare_overhead.py --stages). A kernel already compiled for a signature is launched directly
# through its compiled handle; the key holds what Triton specialises these arguments on (constexpr values,
# tensor dtypes and 16-byte alignment, the width of the unspecialised ints). Tensors go to the launcher as
# their device addresses (an int is taken as is; a tensor costs the launcher a `data_ptr()` call and a driver
# query each, ~14 per launch). Anything unexpected (another Triton, the interpreter) takes Triton's own path,
# and keeps taking it.
DIRECT_ENV = "FUSECHECK_TRITON_DIRECT"  # "0": every launch through Triton's own path
_compiled: dict = {}
_direct = [os.environ.get(DIRECT_ENV, "1") != "0"]
CONSTEXPR, UNSPECIALISED, SPECIALISED = 0, 1, 2


_kinds: dict = {}  # id(kernel) -> each parameter's kind (the kernels are module-level: they live as long)


def _param_kinds(kernel) -> tuple[int, ...]:
    kinds = _kinds.get(id(kernel))
    if kinds is None:
        kinds = _kinds[id(kernel)] = tuple(CONSTEXPR if p.is_constexpr else UNSPECIALISED if p.do_not_specialize
                                           else SPECIALISED for p in kernel.params)
    return kinds


def _signature(kernel, args: tuple, device: int) -> tuple[tuple, tuple]:
    """(the specialisation key, the arguments with tensors as addresses); an empty key where an argument is
    one Triton specialises otherwise (its own path then decides)."""
    key, plain = [id(kernel), device], []
    for kind, a in zip(_param_kinds(kernel), args):
        if kind == CONSTEXPR:
            key.append(a)
            plain.append(a)
        elif isinstance(a, torch.Tensor):
            ptr = a.data_ptr()
            key.append((a.dtype, ptr % 16 == 0))
            plain.append(ptr)
        elif kind == UNSPECIALISED and type(a) is int:
            key.append(-2 ** 31 <= a < 2 ** 31)
            plain.append(a)
        else:
            return (), ()
    return tuple(key), tuple(plain)


def launch(kernel, grid: int, args: tuple, options: dict) -> None:
    """kernel[(grid,)](*args, **options), directly through the compiled kernel when one exists for the
    arguments' signature (CUDA)."""
    # NVIDIA only: ROCm's backend also specialises on a tensor's storage size (32-bit buffer offsets)
    if not _direct[0] or not args[0].is_cuda or torch.version.hip is not None:
        kernel[(grid,)](*args, **options)
        return
    device = torch.cuda.current_device()
    key, plain = _signature(kernel, args, device)
    key += tuple(sorted(options.items()))
    compiled = _compiled.get(key)
    if compiled is None:  # Triton's own path compiles (a compile error is the caller's, as before)
        compiled = kernel[(grid,)](*args, **options)
        if len(key) > len(options) and hasattr(compiled, "packed_metadata"):
            _compiled[key] = compiled
        return
    try:
        from triton import knobs

        enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        stream = torch._C._cuda_getCurrentRawStream(device)
        # the hooks (a profiler's) see the tensors, as on Triton's own path
        meta = None if enter is None else compiled.launch_metadata((grid, 1, 1), stream, *args)
        compiled.run(grid, 1, 1, stream, compiled.function, compiled.packed_metadata, meta, enter, leave, *plain)
    except Exception as e:  # noqa: BLE001 - whatever the internals changed: Triton's own path from now on
        _direct[0] = False
        warnings.warn(f"fusecheck: direct Triton launch unavailable ({type(e).__name__}: {e}); using Triton's "
                      "launch path")
        kernel[(grid,)](*args, **options)


class _Layout:
    """Where each partial lies: per program, one int32 row (WI: counts of every pair, the tensor counts, the
    octave counts) and one fp64 row (WF: sums, maxima, octave maxima of every pair); reduced over programs,
    the three sections (int sums, fp64 sums, fp64 maxima) concatenate to one vector, followed by three
    constants (the element count, -1, 0). Each accumulator entry of pair p is `vec[plus] - vec[minus]`
    (`minus` the constant 0 except for counts kept as complements): one gather on the host, not a Python
    loop over entries."""

    def __init__(self, pairs: tuple[tuple[int, int], ...], same: tuple[bool, ...]):
        self.pairs, self.same, npairs = pairs, same, len(pairs)
        nc, nt = len(COUNTS), len(TENSOR_COUNTS)
        self.wi = npairs * (nc + OCT_BINS) + 3 * nt
        self.wf = npairs * (len(SUMS) + len(MAXES) + OCT_BINS)
        # offsets within a program's rows (the kernels' pointer arguments), then within the reduced vector
        self.cnt, self.tcnt, self.hist = 0, npairs * nc, npairs * nc + 3 * nt
        self.sums, self.maxes = 0, npairs * len(SUMS)
        self.omax = self.maxes + npairs * len(MAXES)
        self.numel = self.wi + self.wf
        self.minus_one, self.zero = self.numel + 1, self.numel + 2
        plus, minus = [], []
        for p in range(npairs):
            for name in ACCUMULATORS:
                for entry in ENTRIES[name](self, p):
                    i, j = entry if isinstance(entry, tuple) else (entry, self.zero)
                    plus.append(i)
                    minus.append(j)
        self.plus_np, self.minus_np = numpy.array(plus), numpy.array(minus)

    def count(self, p: int, name: str) -> int:
        return self.cnt + p * len(COUNTS) + COUNTS.index(name)

    def complement(self, p: int, name: str) -> tuple[int, int]:
        """n_finite minus a count (rel_lt_c = n_finite - rel_ge_c)."""
        return self.count(p, "n_finite"), self.count(p, name)

    def tensor(self, p: int, side: int, name: str) -> int:
        return self.tcnt + len(TENSOR_COUNTS) * self.pairs[p][side] + TENSOR_COUNTS.index(name)

    def sum(self, p: int, name: str) -> int:
        return self.wi + self.sums + p * len(SUMS) + SUMS.index(name)

    def max(self, p: int, name: str) -> int:
        return self.wi + self.maxes + p * len(MAXES) + MAXES.index(name)

    def octaves(self, section: str, p: int) -> list[int]:
        base = self.hist if section == "hist" else self.wi + self.omax
        return [base + p * OCT_BINS + b for b in range(OCTAVES)]

    def entries(self, vec: torch.Tensor, n: int) -> torch.Tensor:
        """[pairs, entries] from the reduced vector (on the host; in numpy: a few hundred values, where each
        torch op on the host costs more than the arithmetic)."""
        ext = numpy.concatenate([vec.numpy(), (float(n), -1.0, 0.0)])
        return torch.from_numpy(ext[self.plus_np] - ext[self.minus_np]).view(len(self.pairs), -1)


@functools.lru_cache(maxsize=64)
def _layout(pairs: tuple[tuple[int, int], ...], same: tuple[bool, ...]) -> _Layout:
    return _Layout(pairs, same)


# accumulator -> its entries for pair p: a vector index, or (plus, minus) for a difference (every ACCUMULATORS
# name: a KeyError names one that is missing)
ENTRIES = {
    **{name: (lambda n: lambda lay, p: [lay.count(p, n)])(name)
       for name in COUNTS if name in ACCUMULATORS and name != "bits_equal"},
    **{name: (lambda n: lambda lay, p: [lay.sum(p, n)])(name) for name in SUMS},
    **{name: (lambda n: lambda lay, p: [lay.max(p, n)])(name) for name in MAXES},
    "numel": lambda lay, p: [lay.numel],
    "a_nonfinite": lambda lay, p: [lay.tensor(p, 0, "nonfinite")],
    "b_nonfinite": lambda lay, p: [lay.tensor(p, 1, "nonfinite")],
    "b_nan": lambda lay, p: [lay.tensor(p, 1, "nan")],
    "n_big": lambda lay, p: [lay.complement(p, "small_n")],
    "rel_lt_1e-3": lambda lay, p: [lay.complement(p, "rel_ge_1e-3")],
    "rel_lt_5e-3": lambda lay, p: [lay.complement(p, "rel_ge_5e-3")],
    "bits_equal": lambda lay, p: [lay.count(p, "bits_equal") if lay.same[p] else lay.minus_one],
    "octave_n": lambda lay, p: lay.octaves("hist", p),
    "octave_max_abs": lambda lay, p: lay.octaves("omax", p),
}


def _raw_partials(raws: list[torch.Tensor], pairs, fconsts: torch.Tensor, ints: tuple[int, int, int],
                  stats: dict | None = None) -> torch.Tensor:
    """[pairs, entries] (on the CPU) of one flat chunk (all on one device), entries in `ACCUMULATORS` order,
    under the thresholds as given."""
    return _partials(raws, pairs, fconsts, ints, ints[2] < EXACT_LOG_BELOW, _unit_scale(raws[0].device), stats)[0]


@functools.lru_cache(maxsize=None)
def _unit_scale(device: torch.device) -> tuple[torch.Tensor, int]:
    """A scale buffer holding 1.0: the kernels then take the thresholds as given (kernels.thresholds)."""
    return torch.ones(1, dtype=torch.float64, device=device), 1


DERIVED = 5  # what the exact kernel writes after the reduced vector: scale, atol, threshold, small_atol, base


def _partials(raws: list[torch.Tensor], pairs, fconsts: torch.Tensor, ints: tuple[int, int, int], exact_log: bool,
              scale: tuple[torch.Tensor, int], stats: dict | None = None) -> tuple[torch.Tensor, list[float]]:
    """([pairs, entries] on the CPU, the thresholds the kernels derived from `scale`) of one flat chunk.
    With the fast pass on: the fast kernel over every tile, then the exact kernel over the tiles it listed;
    their per-program rows are reduced together (each tile counted once). `stats` (tests, benchmarks)
    receives the number of tiles and of listed tiles."""
    exact, _ = _kernels()
    device, n = raws[0].device, raws[0].numel()
    progs = _programs(n, device, BLOCK, PROGRAMS_PER_SM)
    tiles_per_prog = _cdiv(_cdiv(n, BLOCK), progs)
    npairs = len(pairs)
    lay = _layout(tuple(pairs), tuple(raws[a].dtype == raws[b].dtype for a, b in pairs))
    xs = list(raws) + [raws[-1]] * (3 - len(raws))
    spec = []
    for (ia, ib), same in zip(list(pairs) + [pairs[0]] * (3 - npairs), lay.same + lay.same[:1] * (3 - npairs)):
        spec += [ia, ib, same]
    shape = (len(raws), npairs, *spec, BLOCK, OCTAVES, OCT_BINS, len(COUNTS), lay.wi, lay.wf, exact_log)
    options = dict(num_warps=NUM_WARPS, **_launch_options(device))
    fast = fast_pass()
    ws = _workspace(lay, progs, tiles_per_prog, fast, device)
    at = (*ints[:2], *scale, ws.derived)  # mant, min_eb, the scale buffer and its length, where derived go
    with _on(device):
        if fast:
            launch(_fast_kernel(), progs, (*xs, n, fconsts, *at, tiles_per_prog, *ws.first, ws.listed, ws.count,
                                           *shape, _ulp_safe(ints)), options)
        launch(exact, progs, (*xs, n, fconsts, *at, tiles_per_prog, *ws.last, ws.listed, ws.count,
                              *shape, fast), options)
        if stats is not None:
            stats.update(tiles=_cdiv(n, BLOCK), listed=int(ws.count.sum()) if fast else None)
        # reduced over programs on the device in one launch (finish_kernel), one transfer
        launch(_finish_kernel(), ws.grid, (ws.ints, ws.floats, ws.vec, ws.rows, lay.wi, lay.wf, lay.maxes,
                                           FINISH_ROWS, FINISH_COLS), {"num_warps": FINISH_WARPS})
    vec = ws.vec.cpu()  # the one transfer: the reduced partials, then the derived thresholds
    return lay.entries(vec[:lay.numel], n), vec[lay.numel:].tolist()


class _Workspace:
    """One launch's output buffers on the device, and the sections the kernels write: one int32 allocation
    (both launches' per-program rows, then the fast kernel's tile lists, `tiles` slots per program, and
    their lengths), one fp64 allocation, the reduced vector. Every element a kernel reads was written earlier
    in the same call, and each call ends in a blocking transfer, so consecutive calls can share one."""

    def __init__(self, lay: _Layout, progs: int, tiles: int, fast: bool, device: torch.device):
        self.tiles = tiles
        self.rows = rows = progs * (1 + fast)  # both launches' rows (the fast kernel's first), reduced together
        self.ints = torch.empty(rows * lay.wi + (progs * tiles + progs) * fast + 1, dtype=torch.int32,
                                device=device)
        self.floats = torch.empty(rows * lay.wf, dtype=torch.float64, device=device)
        listed_at = rows * lay.wi
        # a program's list starts at its index times the call's tiles per program (at most `tiles`)
        self.listed = self.ints[listed_at:listed_at + progs * tiles]
        self.count = self.ints[listed_at + progs * tiles:][:max(progs * fast, 1)]
        self.first, self.last = self._sections(lay, 0), self._sections(lay, rows - progs)
        self.vec = torch.empty(lay.wi + lay.wf + DERIVED, dtype=torch.float64, device=device)
        self.derived = self.vec[lay.wi + lay.wf:]
        self.grid = _cdiv(lay.wi, FINISH_COLS) + _cdiv(lay.wf, FINISH_COLS)

    def _sections(self, lay: _Layout, row0: int) -> tuple[torch.Tensor, ...]:
        i, f = row0 * lay.wi, row0 * lay.wf
        return (self.ints[i + lay.cnt:], self.ints[i + lay.tcnt:], self.floats[f + lay.sums:],
                self.floats[f + lay.maxes:], self.ints[i + lay.hist:], self.floats[f + lay.omax:])


# Kept for the next call of the same pairs and launch width: the allocations and the dozen views cost more
# host time than the kernels take at a million elements (benchmarks/compare_overhead.py). One per pair layout,
# device and thread; it grows to the largest tensor's tile lists (4 bytes per 32 elements: 34 MB at 2.7e8).
_workspaces: dict = {}


def _workspace(lay: _Layout, progs: int, tiles_per_prog: int, fast: bool, device: torch.device) -> _Workspace:
    key = (lay.pairs, lay.same, progs, fast, device, threading.get_ident())
    ws = _workspaces.get(key)
    if ws is None or ws.tiles < tiles_per_prog:
        ws = _workspaces[key] = _Workspace(lay, progs, tiles_per_prog, fast, device)
    return ws


def _fconsts(fparams: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The kernel's fp64 parameters on `device`, kept per (values, device): a host-to-device copy from
    pageable memory waits for the stream, once per distinct tolerance instead of once per call."""
    return _fconsts_on(tuple(fparams.to(torch.float64).tolist()), device)


@functools.lru_cache(maxsize=256)
def _fconsts_on(values: tuple[float, ...], device: torch.device) -> torch.Tensor:
    return torch.tensor(values + CONSTS, dtype=torch.float64).to(device)


# entries that are fp64 sums (summation order may differ); every other entry (counts, maxima) must be equal
FLOAT_SUM_COLUMNS = torch.tensor([name in SUMS for name in COLUMNS])
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
    return rows_agree(got, want, SUM_RTOL, FLOAT_SUM_COLUMNS)


def _takes(tensors: list[torch.Tensor], pairs, acc: torch.dtype, fparams: torch.Tensor) -> bool:
    """Whether the kernel answers these at all: it reads up to 3 tensors of its dtypes, from MIN_ELEMS up, and
    "a difference beyond atol implies finite" needs atol >= 0."""
    return (tensors[0].numel() >= max(MIN_ELEMS, 1) and len(tensors) <= 3 and len(pairs) <= 3
            and supports(tensors, acc) and min(fparams.tolist()) >= 0)


def _variant(device: torch.device, tensors: list[torch.Tensor], pairs, ints: tuple[int, int, int],
             exact_log: bool) -> tuple:
    """What one compile (and one self-check) serves."""
    return device.type, tuple(t.dtype for t in tensors), pairs, exact_log, fast_pass(), _ulp_safe(ints)


def walk(tensors: list[torch.Tensor], pairs: tuple[tuple[int, int], ...], device: torch.device,
         acc: torch.dtype, fparams: torch.Tensor, iparams: torch.Tensor) -> torch.Tensor | None:
    """The cores' protocol (cores/__init__.py) through the kernel: [pairs, entries] (on the CPU: reduced on
    the device, then one transfer per chunk), or None where another core must answer (unsupported dtypes, no
    Triton, a variant that failed). On-device contiguous tensors go in one launch; others in
    DEFAULT_CHUNK_ELEMS chunks moved to `device` (memory bounded by the chunk)."""
    if not _takes(tensors, pairs, acc, fparams):
        return None
    ints = tuple(int(v) for v in iparams.tolist())
    variant = _variant(device, tensors, pairs, ints, ints[2] < EXACT_LOG_BELOW)
    if variant in _failed:
        return None
    whole = all(t.device == device and t.is_contiguous() for t in tensors)
    size = tensors[0].numel() if whole else DEFAULT_CHUNK_ELEMS
    fconsts = _fconsts(fparams, device)
    sums, maxes, chunks = None, None, 0
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
            chunks += 1
    except Exception as e:  # a compile error, an unsupported GPU: the eager core still answers
        warnings.warn(f"fusecheck: Triton comparison kernel unavailable ({type(e).__name__}: {e}); using eager")
        _failed.add(variant)
        return None
    if sums is None:
        return None
    return sums if chunks == 1 else torch.where(SUM_COLUMNS, sums, maxes)


def _abs_max(xs: list[torch.Tensor]) -> float:
    out, progs = _abs_max_partials(xs)
    return max(out[:progs].tolist())  # one transfer of the per-program maxima, no reduction launch


_scale_buffers: dict = {}  # the abs-max pass's per-program maxima, per device and thread


def _abs_max_partials(xs: list[torch.Tensor]) -> tuple[torch.Tensor, int]:
    """The per-program maxima of |x| (finite x) on the device, and how many: launched, not waited for. The
    buffer is kept per device and thread (each call ends in a blocking transfer, so the next may reuse it)."""
    _, kernel = _kernels()
    n, device = xs[0].numel(), xs[0].device
    block = ABS_MAX_BLOCK if device.type == "cuda" else BLOCK
    progs = _programs(n, device, block, ABS_MAX_PROGRAMS_PER_SM)
    key = (device, threading.get_ident())
    out = _scale_buffers.get(key)
    if out is None or out.numel() < progs:
        out = _scale_buffers[key] = torch.empty(progs, dtype=torch.float64, device=device)
    with _on(device):
        launch(kernel, progs, (xs[0], xs[-1], n, _cdiv(_cdiv(n, block), progs), out, len(xs), block),
               {"num_warps": ABS_MAX_WARPS})
    return out, progs


def walk_at_scale(tensors: list[torch.Tensor], pairs: tuple[tuple[int, int], ...], device: torch.device,
                  acc: torch.dtype, fparams: torch.Tensor, iparams: torch.Tensor,
                  scale_of: tuple[int, ...]) -> tuple[torch.Tensor, float, list[float]] | None:
    """walk() under thresholds not yet scaled: the abs-max pass over tensors[scale_of] and the walk are
    launched back to back, and the kernels derive the thresholds from the pass's partials on the device
    (kernels.thresholds), so no transfer waits between them. Returns ([pairs, entries], the scale, the
    derived (atol, small threshold, small_atol, octave base)) for the caller to check against its own
    derivation; None where this path does not apply (then the caller takes the scale first): not whole on
    this device, below MIN_ELEMS, a variant not yet self-checked or failed, or a scale whose octave base
    needs the exact-log variant (a tensor of zeros: one pass wasted, rare)."""
    if (not 1 <= len(scale_of) <= 2 or not _takes(tensors, pairs, acc, fparams)
            or not all(t.device == device and t.is_contiguous() for t in tensors)):
        return None
    ints = tuple(int(v) for v in iparams.tolist())
    variant = _variant(device, tensors, pairs, ints, False)
    scales = [tensors[i].reshape(-1) for i in scale_of]
    abs_variant = ("abs_max", device.type, tuple(t.dtype for t in scales))
    if not {variant, abs_variant} <= _checked or {variant, abs_variant} & _failed:
        return None  # walk() and finite_abs_max() check them on their first call
    try:
        entries, derived = _partials([t.reshape(-1) for t in tensors], pairs, _fconsts(fparams, device), ints, False,
                                     _abs_max_partials(scales))
    except Exception as e:  # noqa: BLE001 - as in walk(): the caller's path answers
        warnings.warn(f"fusecheck: Triton comparison kernel unavailable ({type(e).__name__}: {e}); using eager")
        _failed.add(variant)
        return None
    if derived[4] < EXACT_LOG_BELOW:
        return None
    return entries, derived[0], derived[1:]


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
