"""The Inductor core: the torch core's one-pass reduction (`torch_core.chunk_partials`) compiled by Inductor: per chunk, one fused loop per pair
(element-wise work and every reduction; nothing per element written back) plus the octave scatters.

Why this shape:
- Traced with make_fx and compiled with `torch._inductor.compile`, not `torch.compile`: the kernel lives in
  this module's cache, outside dynamo, so run_check's `torch._dynamo.reset()` between phases does not
  discard it and a user's own dynamo state (a model being compiled, recompile limits) never sees it.
- Static chunk size: the tail chunk is padded with zeros, and the zeros' exact contribution (one zero
  element through the eager core, times the padding: `torch_core.pad_correction`) is subtracted. The
  thresholds are tensors, so one compile serves every tensor of a dtype combination; dynamic shapes cost
  2-4x on Inductor's C++ backend (measured at 4 Mi elements).
- Self-checked: the first chunk of each compiled variant is also reduced eagerly and must agree (counts and
  maxima exactly, sums to fp64 rounding), else the eager core is used for the rest of the process. A
  compile that fails (no compiler, no Triton) falls back the same way, with one warning. Never a false PASS
  from a miscompiled reduction.
On by default on CUDA for tensors of >= 2^24 elements (one compile per dtype combination and process, its
time on the H200 not measured yet; Inductor's on-disk cache shortens later processes); on CPU only with
FUSECHECK_COMPILED_COMPARE=1 and the C core off (FUSECHECK_CPU_CORE=0: the C core answers first; 2 shared
cores: 27-115 s to compile, then 2-2.5x faster than eager at 1.6e7 elements; docs/benchmarks.md).
"""
from __future__ import annotations

import os
import warnings
from typing import Callable

import torch

from fusecheck.compare.accumulators import rows_agree
from fusecheck.compare.cores import torch_core

ENV = "FUSECHECK_COMPILED_COMPARE"  # "1" on; unset or "0": off (opt-in until the H200 numbers say it pays)
CHUNK_ELEMS = {"cuda": 1 << 24, "cpu": 1 << 20}  # compiled chunk size; smaller tensors stay eager
SUM_TOL = 1e-9  # self-check: sums may differ by summation order

_kernels: dict[tuple, Callable | None] = {}  # variant -> compiled kernel, None once it failed


def enabled(device: torch.device) -> bool:
    flag = os.environ.get(ENV, "")
    return flag == "1"


def chunk_elems(device: torch.device) -> int:
    return CHUNK_ELEMS.get(device.type, CHUNK_ELEMS["cuda"])


def _agree(compiled: torch.Tensor, eager: torch.Tensor) -> bool:
    return rows_agree(compiled, eager, SUM_TOL)


def _compile(fn: Callable, raws: list[torch.Tensor], consts: tuple, params: tuple) -> Callable:
    from torch.fx.experimental.proxy_tensor import make_fx

    def flat(*args):
        return fn(list(args[len(params):]), *consts, *args[:len(params)])
    example = [*params, *raws]
    kernel = torch._inductor.compile(make_fx(flat)(*example), example)
    return lambda chunk, ps: kernel(*ps, *chunk)


def call(fn: Callable, raws: list[torch.Tensor], consts: tuple = (), params: tuple = ()) -> torch.Tensor | None:
    """`fn(raws, *consts, *params)` through its compiled kernel (one per fn, dtypes, size, device and
    consts); None where that kernel is unavailable or failed its self-check."""
    key = (fn.__module__, fn.__qualname__, raws[0].device, tuple(r.dtype for r in raws), raws[0].numel(), consts)
    if key in _kernels:
        kernel = _kernels[key]
        return None if kernel is None else kernel(raws, params)
    _kernels[key] = None
    try:
        kernel = _compile(fn, raws, consts, params)
        out = kernel(raws, params)
        ok = _agree(out, fn(raws, *consts, *params))
    except Exception as e:  # no compiler / no Triton / an Inductor bug: the eager core still answers
        warnings.warn(f"fusecheck: compiled {fn.__name__} unavailable ({type(e).__name__}: {e}); using eager")
        return None
    if not ok:
        warnings.warn(f"fusecheck: compiled {fn.__name__} disagreed with its eager version; using eager")
        return None
    _kernels[key] = kernel
    return out


def padded(raws: list[torch.Tensor], size: int) -> list[torch.Tensor]:
    """A short (tail) chunk padded with zeros to the compiled size (see torch_core.pad_correction)."""
    out = []
    for r in raws:
        p = r.new_zeros(size)
        p[:r.numel()] = r
        out.append(p)
    return out


def _applies(tensors: list[torch.Tensor], device: torch.device) -> bool:
    return (enabled(device) and tensors[0].numel() >= chunk_elems(device) and not torch.compiler.is_compiling())


def walk(tensors: list[torch.Tensor], pairs: tuple[tuple[int, int], ...], device: torch.device,
         acc: torch.dtype, fparams: torch.Tensor, iparams: torch.Tensor) -> torch.Tensor | None:
    """The cores' protocol (cores/__init__.py); None where it does not apply (off, small, fp32 accumulation).
    A chunk whose kernel is unavailable is reduced by the torch core."""
    if acc != torch.float64 or not _applies(tensors, device):
        return None
    host = (fparams, iparams)  # thresholds as given (CPU), for the padding correction
    fparams, iparams = fparams.to(device), iparams.to(device)
    size = chunk_elems(device)

    def partials(raws: list[torch.Tensor]) -> torch.Tensor:
        n, out = raws[0].numel(), None
        if n == size:
            out = call(torch_core.chunk_partials, raws, (pairs, acc), (fparams, iparams))
        else:
            out = call(torch_core.chunk_partials, padded(raws, size), (pairs, acc), (fparams, iparams))
            if out is not None:
                out = out - torch_core.pad_correction(raws, pairs, acc, *host, size - n)
        return torch_core.chunk_partials(raws, pairs, acc, fparams, iparams) if out is None else out
    return torch_core.reduce_chunks(tensors, device, size, partials)


def finite_abs_max(tensors: list[torch.Tensor]) -> float | None:
    """The cores' protocol; zero padding adds nothing to a maximum of |x|."""
    device = tensors[0].device
    if not _applies(tensors, device):
        return None
    size = chunk_elems(device)

    def per_chunk(raws: list[torch.Tensor]) -> torch.Tensor:
        out = call(torch_core.chunk_abs_max, raws if raws[0].numel() == size else padded(raws, size))
        return torch_core.chunk_abs_max(raws) if out is None else out
    return torch_core.abs_max_chunks(tensors, size, per_chunk)
