"""The C core, on CPU: `torch_core.chunk_partials`' accumulators for every pair from one read, in C.

Why C and not numba or Inductor: the torch core is ~250 vectorised passes per chunk (15x assert_close at
1.6e7 elements on 2 cores) and Inductor's compile of it costs ~50 s. `c_core.c` is one vectorised loop
per block of 1024 elements (every pair's sums, counts and maxima in registers; a scalar loop for the octave
histogram), built at first use by the system C compiler (the one Inductor on CPU needs anyway) in < 1 s and
cached on disk by a hash of source, flags, compiler and CPU. No new dependency (numba would add llvmlite and
a numpy pin, and compiles in seconds per process without its cache), and the floating point is under our
control: no -ffast-math, -ffp-contract=off, so every element is computed by the same fp64 operations as
the torch core; counts and maxima are bit-identical, sums differ by summation order only.

Threads: the flat range is split into torch.get_num_threads() parts, one Python thread each calling the
library through ctypes (which releases the GIL); per-thread rows are combined after (sum or max per entry).
Nothing per element is kept: memory is a 24 KiB buffer per thread, or one chunk for a non-contiguous tensor.

Never a false PASS: at load the library reduces fixed data with every special value (NaN, +-Inf, +-0,
subnormals, ties, all-finite blocks) and must agree with the torch core; then the first call of each dtype
combination is also reduced by the torch core on its first chunk and must agree (counts and maxima
exactly, sums to 1e-9), else the torch core answers for the rest of the process. No compiler, a failed
build or self-test, or `FUSECHECK_CPU_CORE=0`: the torch core, with one warning (none for the opt-out).
"""
from __future__ import annotations

import ctypes
import hashlib
import math
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

import torch

from fusecheck.compare.accumulators import ACCUMULATORS, iter_aligned_chunks, rows_agree
from fusecheck.compare.cores import torch_core

ENV = "FUSECHECK_CPU_CORE"  # "0": off (the torch core); on by default
CACHE_ENV = "FUSECHECK_CACHE_DIR"
SOURCE = Path(__file__).with_name("c_core.c")
FLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fopenmp-simd", "-fno-trapping-math", "-shared", "-fPIC"]
PORTABLE_FLAGS = [f for f in FLAGS if f != "-march=native"]  # a compiler without -march=native
KINDS = {torch.float64: 0, torch.float32: 1, torch.float16: 2, torch.bfloat16: 3}
# The C row's slots, in c_core.c's `enum slot` order; `numel` is added here, `bits_equal` is -1 across
# dtypes. An accumulator missing here turns the core off (the torch core answers), never a wrong row.
SLOTS = ("n_finite", "a_nonfinite", "b_nonfinite", "b_nan", "nonfinite_mismatch", "sq_err", "max_abs",
         "max_rel", "sum_rel", "sq_rel", "n_big", "dot", "a_sq", "b_sq", "ulp_max", "ulp_sum", "ulp_gt1",
         "small_n", "small_err", "small_max_abs", "rel_lt_1e-3", "rel_lt_5e-3", "mismatches", "bits_equal",
         "sum_err", "octave_n", "octave_max_abs")
PARALLEL_MIN = 1 << 16  # elements per piece at least (a thread start or a C call costs more below)
CALL_ELEMS = 1 << 22  # elements per C call at most: Ctrl-C is seen between calls (~50 ms each)
PIECES_PER_THREAD = 8  # pieces handed out in turn: on a shared machine a slowed thread takes fewer
NONCONTIGUOUS_CHUNK = 1 << 20  # elements copied at a time from a non-contiguous tensor
CHECK_ELEMS = 1 << 16  # first-call self-check against the torch core
SUM_TOL = 1e-9

_lib: ctypes.CDLL | None = None
_lib_error: str | None = None
_checked: dict[tuple, bool] = {}  # (dtypes, pairs) -> agreed with the torch core
_lock = threading.Lock()


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def _compiler() -> list[str]:
    """$CC (it may carry words: "ccache gcc"), else the first of cc, gcc, clang on the PATH."""
    named = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang") or "cc"
    return shlex.split(named)


def _cpu_id() -> str:
    """What -march=native depends on: the CPU's feature flags (Linux), else the platform's name."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.machine() + platform.processor()


def cache_dir() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "fusecheck")
    return Path(base).expanduser()


def _build(cc: list[str]) -> Path:
    """The shared library for this source, compiler and CPU: from the cache, or compiled into it."""
    version = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=60).stdout
    source = SOURCE.read_bytes()
    parts = [source, " ".join(FLAGS).encode(), " ".join(cc).encode(), version.encode(), _cpu_id().encode()]
    key = hashlib.sha256(b"\0".join(parts))
    target = cache_dir() / f"c_core-{key.hexdigest()[:20]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        for flags in (FLAGS, PORTABLE_FLAGS):
            done = subprocess.run([*cc, *flags, "-o", str(out), str(SOURCE)], capture_output=True, text=True,
                                  timeout=300)
            if done.returncode == 0:
                break
        else:
            raise RuntimeError(f"{' '.join(cc)} failed: {done.stderr.strip()[-500:]}")
        os.replace(out, target)  # atomic: a concurrent process sees the whole library or none
    return target


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(_build(_compiler())))
    lib.fc_n_slots.restype = ctypes.c_int
    lib.fc_partials.restype = ctypes.c_int
    lib.fc_partials.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int32), ctypes.c_int32,
                                ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.c_int64, ctypes.c_int64,
                                ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.fc_finite_abs_max.restype = ctypes.c_double
    lib.fc_finite_abs_max.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_int64]
    octaves = lib.fc_octaves()
    sizes = {name: (octaves if name.startswith("octave_") else 1) for name in SLOTS}
    if lib.fc_n_slots() != sum(sizes.values()) or any(sizes.get(n) != a.size for n, a in ACCUMULATORS.items()
                                                       if n != "numel"):
        raise RuntimeError("c_core.c's slots do not match accumulators.ACCUMULATORS")
    _self_test(lib)
    return lib


def _self_test(lib: ctypes.CDLL) -> None:
    """Every path of the library against the torch core once, on fixed data with NaN, +-Inf, +-0,
    subnormals, exact threshold ties and an all-finite stretch: a user's first chunk (the per-dtype check in
    `walk`) may hold no NaN at all, and a miscompiled NaN path must not wait for one to show."""

    gen = torch.Generator().manual_seed(0)
    scale = torch.exp2(torch.randint(-30, 10, (4096,), generator=gen).double())
    g = torch.randn(4096, dtype=torch.float64, generator=gen) * scale
    specials = [0.0, -0.0, math.nan, math.inf, -math.inf, 5e-324, 2.0 ** -1030, 2.0 ** -20, 1.0, 1e308]
    g[2048::97] = torch.tensor(specials * 3, dtype=torch.float64)[:len(range(2048, 4096, 97))]  # 1st half finite
    r = g * (1 + 1e-2 * torch.randn(4096, dtype=torch.float64, generator=gen))
    r[3000::89] = math.nan
    r[3001::101] = -math.inf
    # exact ties at rtol = atol = small_atol = 2^-7: the mismatch bound, the small-value error, ULP = 1
    ties = [(1.0, 1 + 2.0 ** -6), (0.0, 2.0 ** -7), (1.0, 1 + 2.0 ** -7), (2.0 ** -20, 2.0 ** -20)]
    for start in (100, 2100):  # in the all-finite half and in the other
        for i, (expected, actual) in enumerate(ties):
            g[start + i], r[start + i] = expected, actual
    fparams, iparams = torch_core.params(torch.float64, mant=7, min_eb=-126, rtol=2.0 ** -7, atol=2.0 ** -7,
                                    small_threshold=2.0 ** -20, small_atol=2.0 ** -7, octave_base=-20)
    pairs = ((2, 1), (2, 0), (1, 0))
    for eager, result in ((torch.bfloat16, torch.bfloat16), (torch.float32, torch.float16)):
        tensors = [g, g.to(eager), r.to(result)]
        want = torch_core.chunk_partials(tensors, pairs, torch.float64, fparams, iparams)
        if not _agree(_rows(lib, tensors, pairs, fparams, iparams), want):
            raise RuntimeError(f"its self-test disagreed with the torch core ({result}, {eager}, float64)")


def library() -> ctypes.CDLL | None:
    """The loaded core, built on first use; None (with one warning) where it cannot be."""
    global _lib, _lib_error
    with _lock:
        if _lib is None and _lib_error is None:
            try:
                _lib = _load()
            except Exception as e:  # no compiler, a failed build, a read-only cache: the torch core answers
                _lib_error = f"{type(e).__name__}: {e}"
                warnings.warn(f"fusecheck: the C comparison core is unavailable ({_lib_error}); using the "
                              "torch core (slower)")
    return _lib


def forget() -> None:
    """Drop the loaded library and the self-checks (a benchmark's cold first call builds anew)."""
    global _lib, _lib_error
    with _lock:
        _lib, _lib_error = None, None
        _checked.clear()


def _usable(tensors: list[torch.Tensor]) -> bool:
    return (enabled() and len(tensors) <= 3 and not torch.compiler.is_compiling()
            and all(type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type == "cpu" and t.dtype in KINDS
                    for t in tensors))


def _pieces(n: int) -> tuple[int, list[tuple[int, int]]]:
    """(threads, ranges): ~PIECES_PER_THREAD ranges per thread, each within [PARALLEL_MIN, CALL_ELEMS]
    elements (bar the last) and a multiple of the C block."""
    threads = 1 if n < 2 * PARALLEL_MIN else max(1, min(torch.get_num_threads(), n // PARALLEL_MIN))
    size = max(1024, min(max(n // (threads * PIECES_PER_THREAD), PARALLEL_MIN), CALL_ELEMS) // 1024 * 1024)
    return threads, [(lo, min(lo + size, n)) for lo in range(0, n, size)]


def _parallel(fn, n: int) -> list:
    """[fn(lo, hi) for each piece of [0, n)], the pieces taken in turn by the threads (the calling thread is
    one of them): a thread that other processes slow down takes fewer pieces instead of holding up all."""
    threads, pieces = _pieces(n)
    results: list = [None] * len(pieces)
    todo = iter(range(len(pieces)))
    lock = threading.Lock()
    failed: list[BaseException] = []

    def work():
        while not failed:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                results[i] = fn(*pieces[i])
            except BaseException as e:  # re-raised by the calling thread
                failed.append(e)
    helpers = [threading.Thread(target=work, daemon=True) for _ in range(min(threads, len(pieces)) - 1)]
    for t in helpers:
        t.start()
    work()
    for t in helpers:
        t.join()
    if failed:
        raise failed[0]
    return results


def _order() -> list[int]:
    """For each entry of an `ACCUMULATORS`-ordered row: its index in the C row, -1 for numel."""
    start, where = 0, {}
    octaves = ACCUMULATORS["octave_n"].size
    for name in SLOTS:
        size = octaves if name.startswith("octave_") else 1
        where[name] = list(range(start, start + size))
        start += size
    return [i for name in ACCUMULATORS for i in where.get(name, [-1])]


def _contiguous_partials(lib, flats: list[torch.Tensor], pairs, fparams, iparams) -> torch.Tensor:
    """[pairs, C slots] over flat contiguous tensors, threads combined."""
    n = flats[0].numel()
    ptrs = (ctypes.c_void_p * len(flats))(*[t.data_ptr() for t in flats])
    kinds = (ctypes.c_int32 * len(flats))(*[KINDS[t.dtype] for t in flats])
    pair_arr = (ctypes.c_int32 * (2 * len(pairs)))(*[i for p in pairs for i in p])
    slots = lib.fc_n_slots()

    def part(lo, hi):
        out = torch.empty(len(pairs), slots, dtype=torch.float64)
        rc = lib.fc_partials(ptrs, kinds, len(flats), pair_arr, len(pairs), lo, hi, fparams.data_ptr(),
                             iparams.data_ptr(), out.data_ptr())
        if rc != 0:
            raise RuntimeError(f"fc_partials returned {rc}")
        return out
    rows = torch.stack(_parallel(part, n))
    return torch.where(_sum_slots(slots), rows.sum(0), rows.amax(0))


def _sum_slots(slots: int) -> torch.Tensor:
    combine = {name: ACCUMULATORS[name].combine for name in SLOTS}
    octaves = ACCUMULATORS["octave_n"].size
    return torch.tensor([combine[name] == "sum" for name in SLOTS
                         for _ in range(octaves if name.startswith("octave_") else 1)])


def _rows(lib, tensors, pairs, fparams, iparams) -> torch.Tensor:
    """[pairs, entries] in `ACCUMULATORS` order over all elements (contiguous whole, or chunk by chunk)."""
    fparams = fparams.to(torch.float64).contiguous()
    iparams = iparams.to(torch.int64).contiguous()
    tensors = [t.detach().resolve_neg() for t in tensors]
    if all(t.is_contiguous() for t in tensors):
        c_rows = _contiguous_partials(lib, [t.reshape(-1) for t in tensors], pairs, fparams, iparams)
    else:
        c_rows = None
        for chunk in iter_aligned_chunks(tensors, NONCONTIGUOUS_CHUNK):
            if chunk[0].numel():
                part = _contiguous_partials(lib, [c.contiguous() for c in chunk], pairs, fparams, iparams)
                c_rows = part if c_rows is None else torch.where(_sum_slots(part.shape[1]), c_rows + part,
                                                                 torch.maximum(c_rows, part))
    order = torch.tensor(_order())
    out = c_rows[:, order.clamp(min=0)]
    out[:, order < 0] = float(tensors[0].numel())
    bits = list(ACCUMULATORS).index("bits_equal")
    for p, (ia, ib) in enumerate(pairs):
        if tensors[ia].dtype != tensors[ib].dtype:
            out[p, bits] = -1.0
    return out


def _agree(fast: torch.Tensor, reference: torch.Tensor) -> bool:
    return rows_agree(fast, reference, SUM_TOL)


def walk(tensors: list[torch.Tensor], pairs: tuple[tuple[int, int], ...], device: torch.device,
         acc: torch.dtype, fparams: torch.Tensor, iparams: torch.Tensor) -> torch.Tensor | None:
    """The cores' protocol (cores/__init__.py): [pairs, entries] for CPU tensors of fp64/fp32/fp16/bf16
    (None: another core answers)."""

    if acc != torch.float64 or not tensors[0].numel() or not _usable(tensors):
        return None
    lib = library()
    if lib is None:
        return None
    key = (tuple(t.dtype for t in tensors), pairs)
    if key not in _checked:
        head = [c.contiguous() for c in next(iter_aligned_chunks(tensors, CHECK_ELEMS))]
        want = torch_core.chunk_partials(head, pairs, acc, fparams, iparams)
        _checked[key] = _agree(_rows(lib, head, pairs, fparams, iparams), want)
        if not _checked[key]:
            warnings.warn("fusecheck: the C comparison core disagreed with the torch core; using the torch core")
    if not _checked[key]:
        return None
    return _rows(lib, tensors, pairs, fparams, iparams)


def finite_abs_max(tensors: list[torch.Tensor]) -> float | None:
    """The cores' protocol: largest finite |x| over same-shape CPU tensors; None: another core answers."""
    if not _usable(tensors):
        return None
    lib = library()
    if lib is None:
        return None
    tensors = [t.detach().resolve_neg() for t in tensors]
    whole = all(t.is_contiguous() for t in tensors)
    best = 0.0
    chunks = [[t.reshape(-1) for t in tensors]] if whole else iter_aligned_chunks(tensors, NONCONTIGUOUS_CHUNK)
    for chunk in chunks:
        for flat in chunk:
            flat = flat.contiguous()
            ptr, kind = flat.data_ptr(), KINDS[flat.dtype]
            best = max([best, *_parallel(lambda lo, hi: lib.fc_finite_abs_max(ptr, kind, lo, hi), flat.numel())])
    return best
