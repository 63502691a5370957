"""A per-element noise band for the max-type checks, measured from the computation itself (issue 27).

Why. The max-type checks (per-octave MaxRel, small-value MaxAbs) exist to catch a few wrong elements where
eager is accurate. But whether eager "is accurate" at an element depends on how the element was computed,
not on its value: a qkv-bias or position-embedding gradient is a sum with heavy cancellation (the key part of
a qkv-bias gradient is exactly zero in exact arithmetic), so an element's rounding error is set by the size
of the terms that cancelled. Eager can be lucky on 46 elements where compiled is not, and the per-octave rule
fails a correct compile (GPT-2/ViT configs, bf16 `--train`, 3 of 12 seeds, compiled RMSE 0.88-1.08x eager's).

1. The band, measured (`eager_spread`). K extra eager runs under randomised rounding -- Monte Carlo
   arithmetic (Verificarlo, CADNA) emulated at op level by a TorchDispatchMode (`RandomRounding`), active in
   forward and in autograd's backward:
   * random rounding: after every op whose floating output is fp16/bf16/fp32 (and that is not exact: data
     movement, copies, selections, sign/abs/relu/max..., upcasts), each output element moves to its lower or
     upper neighbour in its own format with probability 1/8 each (`flip`). That is the distribution of
     stochastic rounding of the exact result (Verificarlo's "random rounding" at the working precision: the
     exact value is uniform in the half-ulp around the rounded one, and SR rounds it away from the nearest
     with probability equal to its distance, 1/8 on average on each side), emulated from the rounded output
     alone: the direction is random because the exact value is not known. A compiler that fuses (keeps an
     intermediate in fp32), contracts an FMA or rounds in another order changes exactly these last bits.
   * reassociation: fp32 reductions are run in a random order of their reduced index (mm/addmm/bmm/baddbmm:
     the contraction index of both operands permuted alike; sum/mean: the reduced dims permuted). A GEMM
     accumulates each output in sequence along K, so a permuted K is an independent draw of the same
     accumulation error -- which is what a compiled kernel with another split/tiling makes. Output rounding
     alone would miss it in fp32 (an fp32 K=4096 dot product accumulates ~45 u of error, its output rounding
     is 0.5 u). bf16/fp16 reductions accumulate in fp32 on CPU and GPU: their order moves the result far
     less than one output ulp, so they are not permuted (the copy would cost and buy nothing). Ops with
     fused internal reductions (convolution, SDPA, layer norm, softmax) get output rounding only.
   * discrete decisions (topk/sort/argmax/argmin/max.dim/min.dim indices, max_pool2d's argmax, relu's and
     hardtanh's masks in forward and backward) are pinned to the unperturbed run's choices (recorded in one
     reference run under the same mode, replayed in order), so the spread is rounding noise and never an
     O(1) routing change; their values are taken from the perturbed input at eager's choice.
   * own generators (one per device, seeded from `seed` and the run index): the process's RNG never moves.
   The spread of an element is max over the K runs of |perturbed - eager|.
   `how="inputs"` is the alternative asked for in the issue: only the floating inputs and parameters are
   moved by one ulp at random (probability 1/2), no op is touched; it measures conditioning, not rounding.
   Measured on 24 stock-Inductor GPT-2/ViT bf16 runs, it gives about the same c (median 1.0-1.6 per run,
   like "ops"): the inputs' last bits reach the same cancellations. It misses what only op-level rounding
   has (fp32 accumulation, an intermediate rounded where the inputs are exact) and needs every parameter
   in the state snapshot, so "ops" is the default.

2. The rule (`judge_band`). band_i = max(|eager_i - golden_i|, spread_i, u |golden_i|, tiny), u the unit
   roundoff of the dtype (no correct run is held to less than its own rounding) and `tiny` the smallest
   normal number (below it a difference is a flush-to-zero choice, not accuracy; this is also the floor of
   an exact zero). No atol: the band is relative to each element's own computation, so multiplying every
   tensor by a power of two changes no z (tested); a tensor of values far below 1 is judged like one at 1.
   z_i = |compiled_i - golden_i| / band_i.

   Null model (what a correct compile gives). Element i has an unknown noise scale s_i (any value, element
   by element: that is the point). Eager's error is one draw, |e_i| ~ s_i |N|; each perturbed run is a draw of
   scale c s_i, so spread_i ~ c s_i max of K |N|; compiled, a correct computation up to `ratio` r = 2 times
   noisier (the RMSE ratio the policy allows), has error ~ r s_i |N|; all independent to first order (the
   perturbations are random, compiled's roundings are its own). Then z_i's tail does not depend on s_i:
       p0(T) = P(r|N| > T max(|N_0|, c|N_1|, ..., c|N_K|))
             = int_0^inf f_{r|N|}(x) erf(x / (T sqrt 2)) erf(x / (c T sqrt 2))^K dx   ~  A (r/T)^(K+1) / c^K,
   computed by quadrature (`null_tail`). The floors only lower z, so p0 bounds the tail from above. c is the
   scale of a perturbed run's difference from eager relative to eager's own error: ~sqrt(2..3) where the
   perturbation covers eager's noise sources (stochastic vs nearest rounding: variance ulp^2/4 against
   ulp^2/12; a reassociated sum: two independent accumulation errors). It is *measured* on each tensor
   (`Spread.calibration`): elements whose first perturbed run moved them by >= 2 ulps (their noise is
   resolved, not one rounding step) are selected, and median(max of the other K-1 runs / |e_i|) is c times
   median(max of K-1 |N| / |N|) -- the selection saw neither numerator nor denominator, so it is unbiased;
   its lower 1e-3 confidence bound is used, never above sqrt(3) (the largest the model predicts), and
   `DEFAULT_C` = 1 when fewer than `MIN_CALIBRATION` elements qualify. (Without the pair, elements are
   selected by |e_i| >= 1 ulp, which biases c low: safe, less power.) Measured: c = 1.5-1.73 in bf16 and
   1.1-1.3 in fp32 on the tests' attention block. A perturbation that misses a noise source gives a smaller c
   and with it a heavier tail: the test adapts instead of alarming.

   Significance over elements. For a ladder of thresholds T_j = 2, 2 sqrt 2, 4, ..., 2^30, the count of
   elements with z > T_j is checked against Binomial(n, p0(T_j)); the row fails when any count reaches
   P(X >= k) < alpha / L (Bonferroni over the L rungs; alpha 1e-5 by default, as `max_rel_alpha`). So
   (a) many elements slightly above band (a systematic error) fail on a low rung, (b) a handful far above it
   fail on a high rung, (c) a lone element fails when n p0(z) < alpha / L, (d) a correct computation of any
   size stays quiet at rate <= alpha. The margin is the largest count / limit over the rungs (limit: halfway
   between the largest passing and the smallest failing count; > 1 fails).

Power, measured (tests/test_noise_band.py; K = 4, alpha 1e-5): a sign flip on 3-8 small values of a
wide-range tensor fails in fp32 and bf16; one fp32 element 10% (or 0.1%) off where eager rounds correctly
fails; a 3x-noisier computation fails from ~3000 elements (at 512-1024 it is at the edge: the RMSE check is
the one for systematic errors). What it gives up: in bf16 a 10% error is only 13-26 ulps, which a 2x-noisier
correct run reaches at an element whose K + 1 draws all came out small (p0(16) ~ 2e-5 at K = 4), so at
n = 512-4096 it takes 8 such elements at K = 4, 3 at K = 8 (and one at K = 8 when 25% off); the per-octave
rule catches a lone one, because it assumes an octave's elements share one noise scale -- the very
assumption that fails on cancellation gradients. `octave_reference` is the middle road: the per-octave
rule with the band's per-octave maxima as eager's error (it passes issue 27's ViT flap and keeps the lone
element at n = 512, not at 4096+).

Cost, measured on CPU (2 shared cores): a perturbed run is 2.4-6x an eager run (the Python dispatch per op
and one random byte per element of each inexact output; fp32 reassociation adds copies), the reference run
1.1-2x; K = 4 in all costs 10-27 eager runs, less for larger models.

Interface (for the integration): `eager_spread(...) -> Spread` (a dict name -> spread tensor, with `.runs`
and `.calibration(name)`), `judge_band(compiled, eager, golden, spread[name], runs=spread.runs,
calibration=spread.calibration(name), ...) -> BandResult(passed, message, stats, margin)`.
"""
from __future__ import annotations

import contextlib
import functools
import math
import time
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Callable, Iterable

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from fusecheck.case import Case
from fusecheck.execute import StateSnapshot, restore_state, run_once, state_snapshot

PERTURBED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}
_PRECISION = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}  # with the hidden bit

# Ops whose floating result is exact given their inputs (no rounding a different computation could do
# differently): data movement and copies, selections, sign/magnitude ops, comparisons-as-values. Perturbing
# one would only widen the band (less power, never a false alarm), so the list may stay incomplete.
EXACT_OPS: frozenset[str] = frozenset({
    "view", "reshape", "permute", "transpose", "t", "contiguous", "flatten", "unflatten", "squeeze",
    "unsqueeze", "expand", "narrow", "select", "slice", "split", "split_with_sizes", "chunk", "unbind", "cat",
    "stack", "clone", "movedim", "flip", "roll", "repeat", "index_select", "gather", "alias", "as_strided",
    "diagonal", "_unsafe_view", "_reshape_alias", "detach", "lift_fresh", "lift_fresh_copy", "masked_select",
    "take_along_dim", "index", "embedding", "constant_pad_nd", "tril", "triu", "where", "masked_fill",
    "neg", "abs", "sign", "sgn", "relu", "threshold_backward", "hardtanh", "hardtanh_backward", "clamp",
    "clamp_min", "clamp_max", "maximum", "minimum", "fmax", "fmin", "max", "min", "amax", "amin", "topk",
    "sort", "kthvalue", "median", "max_pool2d_with_indices", "floor", "ceil", "round", "trunc", "fill",
    "zero", "zeros_like", "ones_like", "empty_like", "full_like", "new_zeros", "new_ones", "new_empty",
    "new_full", "slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter", "copy",
    "expand_copy", "permute_copy", "view_copy", "transpose_copy", "unsqueeze_copy", "squeeze_copy",
    "t_copy", "alias_copy", "split_copy", "unbind_copy", "slice_copy", "select_copy", "detach_copy",
    "_to_copy", "to", "_copy_from", "_copy_from_and_resize", "set", "resize", "empty_strided", "scalar_tensor",
    "zeros", "ones", "full", "empty", "arange", "unfold", "im2col", "col2im", "pixel_shuffle",
    "pixel_unshuffle", "channel_shuffle", "native_dropout",
})
# conversions: exact when the destination holds every value of the source, a rounding otherwise
_CONVERSIONS = frozenset({"_to_copy", "to", "copy", "_copy_from", "_copy_from_and_resize"})


def _name(func) -> str:
    return func._opname.rstrip("_") if hasattr(func, "_opname") else str(func)


def _precision(dtype: torch.dtype) -> int:
    return _PRECISION.get(dtype, 0)


def _tensors(tree) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


_MAX_BITS = {torch.float16: 0x7BFF, torch.bfloat16: 0x7F7F, torch.float32: 0x7F7FFFFF}  # magnitude of max finite


def _random_bytes(n: int, gen: torch.Generator, device) -> torch.Tensor:
    """n uniform random bytes (one 64-bit draw per 8: the generator is the cost of a perturbation)."""
    words = torch.randint(-2**63, 2**63 - 1, ((n + 7) // 8,), generator=gen, dtype=torch.int64,
                          device=gen.device)
    return words.view(torch.uint8)[:n].to(device)


def flip_last_bits(t: torch.Tensor, gen: torch.Generator, p: float) -> None:
    """In place: each finite nonzero element moves to its upper/lower neighbour in its format with
    probability p each (p is taken in steps of 1/256), by +-1 on the bit pattern of the sign-magnitude float:
    the direction is random, so which way a negative number moves does not matter. Zeros, +-inf, NaN and
    +-max stay (an exact zero is not a rounding; the neighbour of max is inf)."""
    bits = _BITS.get(t.dtype)
    if bits is None or t.numel() == 0:
        return
    k = min(int(round(p * 256)), 128)
    if k <= 0:
        return
    b = _random_bytes(t.numel(), gen, t.device).view(t.shape)
    low = 2 * (b < k).to(torch.int8)
    step = (1 - low) if k == 128 else (b < 2 * k).to(torch.int8) - low  # -1: [0, k), +1: [k, 2k), else 0
    view = t.view(bits)
    mag = view & (0x7FFF if bits is torch.int16 else 0x7FFFFFFF)
    ok = (mag > 0) & (mag < _MAX_BITS[t.dtype])
    view.add_(step * ok)


# --- discrete decisions: recorded once, replayed in every perturbed run --------------------------------

def _mask_of(func, args, out):
    """(tensor to record, how to rebuild the output from it) for a decision op, or None."""
    name = _name(func)
    if name in ("topk", "sort"):
        return out[1]
    if name in ("argmax", "argmin"):
        return out
    if name in ("max", "min") and isinstance(out, (tuple, list)) and len(out) == 2:
        return out[1]
    if name == "max_pool2d_with_indices":
        return out[1]
    if name == "relu":
        return out > 0
    if name == "threshold_backward":
        return args[1] > args[2]
    if name == "hardtanh_backward":
        return (args[1] > args[2]) & (args[1] < args[3])
    return None


DECISION_OPS = frozenset({"topk", "sort", "argmax", "argmin", "max", "min", "max_pool2d_with_indices",
                          "relu", "threshold_backward", "hardtanh_backward"})


def _replayed(func, args, kwargs, out, recorded):
    """The output of a decision op with eager's recorded choice applied to this run's inputs."""
    name = _name(func)
    x = args[0]
    if name in ("topk", "sort"):
        return (x.gather(_dim_arg(func, args, kwargs), recorded), recorded)
    if name in ("argmax", "argmin"):
        return recorded
    if name in ("max", "min"):
        dim, keep = _dim_arg(func, args, kwargs), _keepdim_arg(args, kwargs)
        idx = recorded if keep else recorded.unsqueeze(dim)
        vals = x.gather(dim, idx)
        return (vals if keep else vals.squeeze(dim), recorded)
    if name == "max_pool2d_with_indices":
        vals = x.flatten(-2).gather(-1, recorded.flatten(-2)).view(out[0].shape)
        return (vals, recorded)
    if name == "relu":
        res = torch.where(recorded, x, torch.zeros((), dtype=x.dtype, device=x.device))
        if func._opname.endswith("_"):
            x.copy_(res)
            return x
        return res
    if name in ("threshold_backward", "hardtanh_backward"):
        return torch.where(recorded, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return out


def _dim_arg(func, args, kwargs) -> int:
    names = [a.name for a in func._schema.arguments]
    i = names.index("dim") if "dim" in names else None
    if "dim" in kwargs:
        d = kwargs["dim"]
    elif i is not None and i < len(args):
        d = args[i]
    else:
        d = func._schema.arguments[i].default_value if i is not None else -1
    return int(d) % max(args[0].dim(), 1)


def _keepdim_arg(args, kwargs) -> bool:
    return bool(kwargs.get("keepdim", args[2] if len(args) > 2 else False))


# --- reassociation: reductions in a random order of their reduced index ---------------------------------

def _perm(n: int, gen: torch.Generator, device) -> torch.Tensor:
    return torch.randperm(n, generator=gen, device=gen.device).to(device)


def _reassociated_args(func, args, kwargs, gen) -> tuple | None:
    """Arguments with the reduced index permuted, or None (not a reduction this knows, or one whose result
    is not fp32: CPU and GPU kernels accumulate bf16/fp16 reductions in fp32, whose order changes far less
    than one output ulp, so the copy would buy nothing)."""
    name = _name(func)
    a = list(args)
    first = next(iter(_tensors(args)), None)
    if first is None or first.dtype is not torch.float32 or kwargs.get("dtype") not in (None, torch.float32):
        return None
    if name in ("mm", "addmm", "bmm", "baddbmm") and not func._opname.endswith("_"):
        i = 1 if name in ("addmm", "baddbmm") else 0
        x, y = a[i], a[i + 1]
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)) or x.layout != torch.strided:
            return None
        kdim = x.dim() - 1
        p = _perm(x.shape[kdim], gen, x.device)
        a[i], a[i + 1] = x.index_select(kdim, p), y.index_select(kdim - 1, p)
        return tuple(a)
    if name in ("sum", "mean") and isinstance(a[0], torch.Tensor) and a[0].layout == torch.strided:
        x = a[0]
        if x.dim() == 0:
            return None
        dims = a[1] if len(a) > 1 else kwargs.get("dim")
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0) or func._overloadname == "default":
            dims = range(x.dim())
        elif isinstance(dims, int):
            dims = [dims]
        for d in dims:
            d = int(d) % x.dim()
            if x.shape[d] > 1:
                x = x.index_select(d, _perm(x.shape[d], gen, x.device))
        a[0] = x
        return tuple(a)
    return None


class RandomRounding(TorchDispatchMode):
    """Monte Carlo arithmetic at op level (see the module docstring). `perturb=False` with `record=True`
    runs every op unchanged and records the decisions (the reference run); `replay` (a recording) pins a
    perturbed run's decisions to it. `dtype`: only outputs of that dtype are perturbed (None: fp16, bf16 and
    fp32 alike, each at its own precision)."""

    def __init__(self, seed: int = 0, *, flip: float = 0.125, reassociate: bool = True, perturb: bool = True,
                 record: bool = False, replay: list | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        self.seed, self.flip, self.reassociate, self.perturb = seed, flip, reassociate, perturb
        self.dtypes = PERTURBED_DTYPES if dtype is None else (dtype,)
        self.recording: list[tuple[str, Any]] | None = [] if record else None
        self.replay = list(replay) if replay is not None else None
        self._cursor = 0
        self.replay_broken: str | None = None
        self._gens: dict[torch.device, torch.Generator] = {}
        self.ops_seen = self.flipped_ops = self.reassociated_ops = self.pinned = 0

    def _gen(self, device: torch.device) -> torch.Generator:
        key = torch.device(device)
        if key not in self._gens:
            gdev = key if key.type != "meta" else torch.device("cpu")
            # salted: a stream of its own even when `seed` is also the model's or the inputs' seed
            self._gens[key] = torch.Generator(device=gdev).manual_seed((self.seed * 0x9E3779B1 + 0x5DEECE66D) % 2**63)
        return self._gens[key]

    def _perturb(self, t: torch.Tensor) -> None:
        """Random rounding of one inexact output, in place (a subclass may perturb differently)."""
        flip_last_bits(t, self._gen(t.device), self.flip)

    def _should_flip(self, func, args, out_t: torch.Tensor) -> bool:
        if out_t.dtype not in self.dtypes:
            return False
        name = _name(func)
        if name in _CONVERSIONS:  # a rounding only when the destination is narrower than the source
            src = next((x for x in _tensors(args) if x.is_floating_point() and x is not out_t), None)
            return src is not None and _precision(src.dtype) > _precision(out_t.dtype)
        if name in EXACT_OPS or torch.Tag.nondeterministic_seeded in func.tags:
            return False
        return any(x.is_floating_point() or x.is_complex() for x in _tensors(args))  # factories are exact

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        if self.perturb and self.reassociate:
            moved = _reassociated_args(func, args, kwargs, self._gen(_device_of(args)))
            if moved is not None:
                args = moved
                self.reassociated_ops += 1
        out = func(*args, **kwargs)
        if name in DECISION_OPS and (self.recording is not None or self.replay is not None):
            out = self._decide(func, args, kwargs, out)
        if not self.perturb:
            return out
        schema_outs = func._schema.returns
        flat = out if isinstance(out, (tuple, list)) else (out,)
        touched = False
        for i, t in enumerate(flat):
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                continue
            alias = schema_outs[i].alias_info if i < len(schema_outs) else None
            if alias is not None and not alias.is_write:
                continue  # a view of an input: never perturbed (its base was, where it was computed)
            if self._should_flip(func, args, t):
                self._perturb(t)
                touched = True
        self.ops_seen += 1
        self.flipped_ops += touched
        return out

    def _decide(self, func, args, kwargs, out):
        rec = _mask_of(func, args, out)
        if rec is None:
            return out
        name = _name(func)
        if self.recording is not None:
            self.recording.append((name, rec.clone()))
            return out
        if self.replay_broken is not None:
            return out
        if self._cursor >= len(self.replay):
            self.replay_broken = f"more decisions than in the reference run (at {name})"
            return out
        want, recorded = self.replay[self._cursor]
        self._cursor += 1
        if want != name or recorded.shape != rec.shape or recorded.device != rec.device:
            self.replay_broken = f"decision {self._cursor} is {name}, the reference run's was {want}"
            return out
        self.pinned += 1
        return _replayed(func, args, kwargs, out, recorded)


def _device_of(args) -> torch.device:
    t = next(iter(_tensors(args)), None)
    return t.device if t is not None else torch.device("cpu")


# --- eager_spread ---------------------------------------------------------------------------------------

class Spread(dict):
    """name -> per-element spread (max over `runs` perturbed eager runs of |perturbed - eager|, fp32 of the
    result's shape). `runs` is K, which the null model of `judge_band` needs; `seconds` the wall time of the
    reference run and of the perturbed runs; `notes` what the report should say.

    `first`/`rest` (bf16, same shapes; only when K >= 2): the first run's |perturbed - eager| and the max over
    the others. They let `judge_band` measure c without selection bias: elements are selected on `first`
    (their noise is resolved) and c is read from `rest` / |eager - golden|, which the selection did not see.
    `calibration(name)` is the pair to pass as judge_band's `calibration`."""

    def __init__(self, *args, runs: int = 0, how: str = "ops", **kw):
        super().__init__(*args, **kw)
        self.runs, self.how = runs, how
        self.seconds: dict[str, float] = {}
        self.notes: list[str] = []
        self.pinned = 0
        self.first: dict[str, torch.Tensor] = {}
        self.rest: dict[str, torch.Tensor] = {}
        # name -> each perturbed run's signed difference from eager (fp32), kept when asked (`keep_runs`):
        # the settling step turns them into whole eager-like runs for the aggregate checks (settle.py)
        self.diffs: dict[str, list[torch.Tensor]] = {}

    def calibration(self, name: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        if name in self.first and name in self.rest:
            return self.first[name], self.rest[name]
        return None


def _floating(results: dict[str, torch.Tensor], names: Iterable[str] | None) -> dict[str, torch.Tensor]:
    keep = set(names) if names is not None else None
    return {k: v for k, v in results.items() if isinstance(v, torch.Tensor) and v.is_floating_point()
            and (keep is None or k in keep)}


def _inputs_perturbed(fn: Callable, case: Case, gen: torch.Generator, dtype) -> Callable:
    """`fn` whose floating inputs and module parameters/buffers are each moved by one ulp at random
    (probability 1/2, either way) before the call: run_once resets the state to its snapshot every run."""
    dtypes = PERTURBED_DTYPES if dtype is None else (dtype,)

    def moved(x):
        if not isinstance(x, torch.Tensor) or x.dtype not in dtypes:
            return x
        y = x.detach().clone()
        flip_last_bits(y, gen, 0.25)
        return x + (y - x.detach()) if x.requires_grad else y

    def call(*args, **kwargs):
        if isinstance(case.model, torch.nn.Module):
            with torch.no_grad():
                for t in list(case.model.parameters()) + list(case.model.buffers()):
                    if t.dtype in dtypes:
                        flip_last_bits(t.data, gen, 0.25)
        return fn(*pytree.tree_map(moved, args), **pytree.tree_map(moved, kwargs))
    return call


def eager_spread(model_fn: Callable, case: Case, *, runs: int = 4, train: bool = False,
                 cotangents: dict[str, torch.Tensor] | None = None, state: StateSnapshot | None = None,
                 names: Iterable[str] | None = None, seed: int = 0, dtype: torch.dtype | None = None,
                 eager: dict[str, torch.Tensor] | None = None, pin_decisions: bool = True,
                 reassociate: bool = True, flip: float = 0.125, how: str = "ops",
                 keep_runs: bool | None = None) -> Spread:
    """Per-element rounding-noise spread of eager: `runs` (K) extra runs of `fusecheck.execute.run_once(
    model_fn, case, train=..., cotangents=..., state=...)` under `RandomRounding` (module docstring), each
    result's spread = max over the K runs of |perturbed - eager|.

    `eager`: the caller's eager results by name (`RunResult.all(...)`); the differences are taken from them.
    Otherwise, and always when `pin_decisions` (the default), one reference run under the mode with nothing
    perturbed records the decisions and is the baseline when `eager` is None (K + 1 runs in all; K when
    `pin_decisions=False` and `eager` is given). `names`: the results to keep (None: every floating output,
    gradient and mutated input/state). `cotangents`: the backward's (eager's; made from `seed` like run_once
    when None, and reused by every run). `state`: the module state every run starts from (a snapshot is
    taken when None). `seed`: the perturbations' own generators (never the process's RNG). `dtype`: only
    outputs of that dtype are perturbed (None: fp16/bf16/fp32). `how="inputs"`: perturb the floating inputs
    and parameters by their last bit instead of the ops (an alternative to compare; needs parameters small
    enough to be snapshot). `keep_runs`: keep each run's signed difference from eager in `Spread.diffs`
    (None: when `names` is given, i.e. for the few rows a caller asked about)."""
    if runs < 1:
        raise ValueError("eager_spread needs at least one perturbed run")
    if how not in ("ops", "inputs"):
        raise ValueError(f"how must be 'ops' or 'inputs', not {how!r}")
    state = state if state is not None else state_snapshot(case)
    try:
        return _spread(model_fn, case, runs=runs, train=train, cotangents=cotangents, state=state, names=names,
                       seed=seed, dtype=dtype, eager=eager, pin_decisions=pin_decisions, reassociate=reassociate,
                       flip=flip, how=how, keep_runs=names is not None if keep_runs is None else keep_runs)
    finally:
        restore_state(case, state)  # the model is left as eager left it, not as a perturbed run did


def _spread(model_fn, case, *, runs, train, cotangents, state, names, seed, dtype, eager, pin_decisions,
            reassociate, flip, how, keep_runs=False) -> Spread:
    out = Spread(runs=runs, how=how)
    recording = None
    t0 = time.perf_counter()
    if pin_decisions and how == "ops" or eager is None:
        record = pin_decisions and how == "ops"
        mode = RandomRounding(seed, perturb=False, record=True) if record else None
        with mode if mode is not None else contextlib.nullcontext():
            ref = run_once(model_fn, case, train=train, cotangents=cotangents, seed=seed, state=state)
        cotangents = ref.cotangents if cotangents is None else cotangents
        recording = mode.recording if mode is not None else None
        ref_results = _floating(ref.all(tuple(ref.after)), names)
        if eager is not None:
            base = _floating(eager, names)
            moved = [k for k in base if k in ref_results and not torch.equal(base[k], ref_results[k])]
            if moved:
                out.notes.append(f"the reference run under the mode differs from eager on {len(moved)} result(s) "
                                 f"(eager is not repeatable, or an op behaves differently under a dispatch mode)")
        else:
            base = ref_results
        del ref, ref_results
    else:
        base = _floating(eager, names)
    out.seconds["reference"] = time.perf_counter() - t0
    if recording:
        out.notes.append(f"{len(recording)} discrete decision(s) pinned to eager's choice in every perturbed run")
    t1 = time.perf_counter()
    spreads: dict[str, torch.Tensor] = {}
    broken = set()
    for k in range(runs):
        run_seed = (int(seed) * 1_000_003 + (k + 1) * 7_919 + (how == "inputs")) & 0x7FFF_FFFF
        if how == "ops":
            mode = RandomRounding(run_seed, flip=flip, reassociate=reassociate, replay=recording, dtype=dtype)
            with mode:
                res = run_once(model_fn, case, train=train, cotangents=cotangents, seed=seed, state=state)
            out.pinned += mode.pinned
            if mode.replay_broken:
                broken.add(mode.replay_broken)
        else:
            gen = torch.Generator().manual_seed(run_seed)
            res = run_once(_inputs_perturbed(model_fn, case, gen, dtype), case, train=train,
                           cotangents=cotangents, seed=seed, state=state)
        results = res.all(tuple(res.after))
        del res
        for name, b in base.items():
            p = results.get(name)
            if not isinstance(p, torch.Tensor) or p.shape != b.shape:
                continue
            signed = p.double() - b.double()
            signed = torch.where(torch.isnan(signed), torch.zeros((), dtype=signed.dtype, device=signed.device),
                                 signed)
            if keep_runs:
                out.diffs.setdefault(name, []).append(signed.float())
            d = signed.abs().float()
            spreads[name] = d if name not in spreads else torch.maximum(spreads[name], d)
            if runs >= 2:
                if k == 0:
                    out.first[name] = d.to(torch.bfloat16)
                else:
                    d16 = d.to(torch.bfloat16)
                    out.rest[name] = d16 if name not in out.rest else torch.maximum(out.rest[name], d16)
        del results
    out.seconds["perturbed"] = time.perf_counter() - t1
    if broken:
        out.notes.append("decisions could not be pinned in every run (" + "; ".join(sorted(broken)) +
                         "): the spread there may include routing changes, which only widens the band")
    out.update(spreads)
    return out


# --- the null model ---------------------------------------------------------------------------------------

DEFAULT_C = 1.0           # spread scale / eager's error scale when a tensor cannot calibrate it (conservative)
MAX_C = math.sqrt(3.0)    # the largest ratio the perturbation model predicts (stochastic vs nearest rounding)
MIN_CALIBRATION = 32      # resolved elements needed to measure c on a tensor
CALIBRATION_CONFIDENCE = 1e-3
LADDER = tuple(2.0 * 2.0 ** (j / 2) for j in range(59))  # 2 .. 2^30, a factor sqrt(2) apart


@functools.lru_cache(maxsize=1)
def _x_grid(steps: int = 1200) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-spaced x in (1e-12, 40) with the trapezoid weights of dx."""
    s = torch.linspace(math.log(1e-12), math.log(40.0), steps + 1, dtype=torch.float64)
    x = s.exp()
    w = x * float(s[1] - s[0])
    w[0] = w[-1] = w[0] / 2
    return x, w


def null_tail(thresholds, *, runs: int, ratio: float = 2.0, c: float = DEFAULT_C) -> torch.Tensor:
    """p0(T) = P(ratio |N| > T max(|N_0|, c |N_1|, ..., c |N_runs|)), all independent standard normals: the
    chance that a correct computation `ratio` times noisier than eager lands above T bands (module docstring)."""
    t = torch.as_tensor(thresholds, dtype=torch.float64).reshape(-1, 1)
    u, w = _x_grid()
    x = u * ratio                                     # compiled's |error|, density of ratio |N|
    dens = math.sqrt(2 / math.pi) * torch.exp(-(u * u) / 2) * w  # f(x) dx for x = ratio u, u ~ |N|
    g = torch.erf(x / (t * math.sqrt(2)))
    if runs:
        g = g * torch.erf(x / (c * t * math.sqrt(2))) ** runs
    out = (g * dens).sum(-1)
    out = torch.where(torch.isinf(t.reshape(-1)), torch.zeros_like(out), out)
    return out.clamp(0.0, 1.0)


def _c_grid(c: float) -> float:
    """c rounded down to a 1% log grid (rounding down only widens the null tail), so that rows share p0."""
    return math.exp(math.floor(math.log(c) / 0.01 + 1e-9) * 0.01) if c > 0 else 0.0


@functools.lru_cache(maxsize=4096)
def _ladder_tail(ladder: tuple[float, ...], runs: int, ratio: float, c: float) -> tuple[float, ...]:
    return tuple(null_tail(ladder, runs=runs, ratio=ratio, c=c).tolist())


@functools.lru_cache(maxsize=64)
def median_max_ratio(runs: int) -> float:
    """Median of max(|N_1..N_runs|) / |N_0|: under the model, spread/|eager error| = c times this."""
    u, w = _x_grid()
    dens = math.sqrt(2 / math.pi) * torch.exp(-u * u / 2) * w  # |N_0| = u

    def cdf(q):  # P(max_K <= q |N_0|)
        return float((torch.erf(q * u / math.sqrt(2)) ** runs * dens).sum())
    lo, hi = math.log(1e-3), math.log(1e3)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(math.exp(mid)) < 0.5 else (lo, mid)
    return math.exp((lo + hi) / 2)


def _log_binom_pmf(k: int, n: int, p: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(p) + (n - k) * math.log1p(-p))


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space from k up (only for k above the mean is it
    small, which is all the rule needs; below the mean it returns 1)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0 or k <= n * p:
        return 1.0
    log_t = _log_binom_pmf(k, n, p)
    total, i, term = 0.0, k, 1.0
    ratio = p / (1 - p)
    while i <= n:
        total += term
        term *= (n - i) / (i + 1) * ratio
        i += 1
        if term < 1e-17 * total:
            break
    return min(1.0, math.exp(log_t + math.log(total)))


def smallest_failing_count(n: int, p: float, level: float) -> int:
    """The least k with P(Binomial(n, p) >= k) < level (n + 1 when none)."""
    lo = max(1, int(n * p))
    if binom_sf(lo, n, p) < level:
        return lo
    step = max(1, int(math.sqrt(n * p)) + 1)
    hi = lo + step
    while hi <= n and binom_sf(hi, n, p) >= level:
        lo, hi = hi, hi + 2 * (hi - lo)
    hi = min(hi, n + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if binom_sf(mid, n, p) < level else (mid, hi)
    return hi


# --- judge_band -----------------------------------------------------------------------------------------

@dataclass
class BandResult:
    passed: bool
    message: str
    stats: dict[str, Any] = field(default_factory=dict)
    margin: float = 0.0  # the largest count / limit over the ladder; > 1 fails

    def to_dict(self) -> dict:
        return {"passed": self.passed, "message": self.message, "margin": self.margin, "stats": dict(self.stats)}


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def _ulp(g_abs: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of `dtype` at |golden| (the subnormal spacing below the smallest normal)."""
    fi = torch.finfo(dtype)
    p = _PRECISION.get(dtype, int(round(-math.log2(fi.eps))) + 1)
    e = torch.frexp(g_abs)[1].clamp_min(math.frexp(fi.tiny)[1])  # g = m 2^e, m in [0.5, 1)
    return torch.ldexp(torch.ones_like(g_abs), e - p)


def _flat_chunks(tensors, chunk: int):
    n = tensors[0].numel()
    flats = [t.reshape(-1) for t in tensors]
    for s in range(0, n, chunk):
        yield s, [f[s:s + chunk] for f in flats]


def judge_band(compiled: torch.Tensor, eager: torch.Tensor, golden: torch.Tensor,
               spread: torch.Tensor | None, *, runs: int, ratio: float = 2.0, alpha: float = 1e-5,
               dtype: torch.dtype | None = None, abs_floor: float | None = None, calibrate: bool = True,
               c: float | None = None, ladder: tuple[float, ...] = LADDER,
               eager_golden: torch.Tensor | None = None,
               calibration: tuple[torch.Tensor, torch.Tensor] | None = None,
               chunk_elems: int = 1 << 22) -> BandResult:
    """Is compiled outside eager's per-element noise band on more elements than chance allows? See the
    module docstring for the band, the null model and the ladder. `spread`: `eager_spread`'s tensor for this
    result (None: the band is eager's error and the floors, runs=0). `runs`: the K that made it. `ratio`: r,
    how much noisier than eager a correct compiled may be (the policy's RMSE ratio). `alpha`: the overall
    false-alarm level (Bonferroni over the ladder). `dtype`: whose unit roundoff and ulp (default: eager's).
    `abs_floor`: the band's absolute floor (default: the smallest normal of the dtype). `c`: fix the spread's
    scale instead of measuring it (`calibrate`). `eager_golden`: eager's own golden when the row's golden
    followed compiled's near-tied decisions (fusecheck/decisions/): eager's error is then the worse of its
    error against both, as rows.py does for the per-octave MaxRel (c is measured against its own golden).
    `calibration`: `Spread.calibration(name)`, (first run's spread, max of the others'): c is then measured on
    elements whose first run moved them by >= 2 ulps, as median(rest / |e|) / median(max of K-1 |N| / |N|),
    free of the selection bias that choosing elements by |e| itself has (which underestimates c, i.e. only
    costs power: the fallback when no calibration pair is given)."""
    dtype = dtype or eager.dtype
    if eager.is_complex():
        compiled, eager, golden = (torch.view_as_real(t.resolve_conj()) for t in (compiled, eager, golden))
        spread = None if spread is None else spread.unsqueeze(-1).expand(*spread.shape, 2)
        eager_golden = None if eager_golden is None else torch.view_as_real(eager_golden.resolve_conj())
        calibration = None
        dtype = eager.dtype
    if not dtype.is_floating_point:
        raise TypeError(f"judge_band judges floating results, not {dtype}")
    runs = 0 if spread is None else int(runs)
    u = unit_roundoff(dtype)
    floor = float(abs_floor) if abs_floor is not None else torch.finfo(dtype).tiny
    lad = torch.tensor(ladder, dtype=torch.float64)
    counts = torch.zeros(len(ladder), dtype=torch.int64)
    n = excluded = nonfinite = 0
    zmax, zarg, worst = 0.0, -1, None
    ratios: list[torch.Tensor] = []
    tensors = [compiled, eager, golden] + ([spread] if spread is not None else [])
    tensors += [eager_golden] if eager_golden is not None else []
    split = calibration is not None and spread is not None and runs >= 2 and c is None and calibrate
    if split:
        tensors += list(calibration)
    device = eager.device
    for start, parts in _flat_chunks([t.to(device) for t in tensors], chunk_elems):
        cc, ee, gg = (x.double() for x in parts[:3])
        ok = torch.isfinite(gg) & torch.isfinite(ee)
        excluded += int((~ok).sum())
        err_e = (ee - gg).abs()
        own_err = err_e
        if eager_golden is not None:
            own = parts[4 if spread is not None else 3].double()
            own_err = torch.where(torch.isfinite(own), (ee - own).abs(), err_e)
            err_e = torch.maximum(err_e, own_err)
        band = torch.maximum(err_e, gg.abs() * u).clamp_min(floor)
        if spread is not None:
            band = torch.maximum(band, parts[3].double().nan_to_num(0.0))
        err_c = (cc - gg).abs()
        z = torch.where(torch.isfinite(cc), err_c / band, torch.full_like(band, math.inf))
        z = torch.where(ok, z, torch.zeros_like(z))
        nonfinite += int((ok & ~torch.isfinite(cc)).sum())
        n += int(ok.sum())
        above = torch.searchsorted(lad.to(z.device), z)  # the number of rungs below each z
        counts += torch.bincount(above.cpu(), minlength=len(ladder) + 1).flip(0).cumsum(0).flip(0)[1:]
        m, i = z.max(0) if z.numel() else (torch.tensor(0.0), torch.tensor(0))
        if float(m) > zmax or zarg < 0:
            zmax, zarg = float(m), start + int(i)
            worst = (float(cc[i]), float(ee[i]), float(gg[i]), float(band[i]))
        r = None
        if split:
            first, rest = parts[-2].double(), parts[-1].double()
            resolved = ok & (first >= 2 * _ulp(gg.abs(), dtype)) & (own_err > 0)
            r = rest[resolved] / own_err[resolved]
        elif calibrate and spread is not None and c is None:
            resolved = ok & (own_err >= _ulp(gg.abs(), dtype)) & (own_err > 0)
            r = parts[3].double()[resolved] / own_err[resolved]
        if r is not None:
            if r.numel() > 200_000:  # enough for a median; keep memory bounded on huge tensors
                r = r[:: r.numel() // 200_000 + 1]
            ratios.append(r.cpu())
    stats: dict[str, Any] = {"n": n, "runs": runs, "ratio": ratio, "alpha": alpha, "excluded_nonfinite": excluded,
                             "max_z": zmax, "argmax": zarg}
    if worst is not None:
        stats.update(dict(zip(("compiled_at_max", "eager_at_max", "golden_at_max", "band_at_max"), worst)))
    if n == 0:
        return BandResult(True, "no element with a finite golden and eager to judge", stats, 0.0)
    if nonfinite:  # no rounding turns a finite value into NaN/Inf where eager and the golden are finite
        stats["nonfinite_compiled"] = nonfinite
        return BandResult(False, f"{nonfinite} of {n} element(s) NaN/Inf in compiled where eager and the golden "
                          f"are finite (first at element {zarg})", stats, math.inf)
    # the spread's scale relative to eager's error, measured on this tensor (lower confidence bound)
    c_used, c_hat, resolved_n = (DEFAULT_C if c is None else float(c)), None, 0
    if ratios and c is None:
        r = torch.cat(ratios).sort().values
        resolved_n = r.numel()
        if resolved_n >= MIN_CALIBRATION:
            med = median_max_ratio(runs - 1 if split else runs)
            c_hat = float(r[resolved_n // 2]) / med
            zq = NormalDist().inv_cdf(1 - CALIBRATION_CONFIDENCE)  # the order statistic below the median
            lo = max(0, int(math.floor(resolved_n / 2 - zq * math.sqrt(resolved_n) / 2)))
            c_used = min(float(r[lo]) / med, MAX_C)
    stats.update(c=c_used, c_hat=c_hat, calibrated_on=resolved_n,
                 calibrated_by="first run / other runs" if split else "eager's error")
    p0 = list(_ladder_tail(tuple(ladder), runs, float(ratio), _c_grid(c_used)))
    level = alpha / len(ladder)
    margin, fail_j, best_p = 0.0, None, 1.0
    rungs = []
    for j, (t, k, p) in enumerate(zip(ladder, counts.tolist(), p0)):
        limit = smallest_failing_count(n, p, level)
        share = k / (limit - 0.5)
        if k:
            rungs.append({"T": t, "count": k, "expected": n * p, "limit": limit - 1})
        if share > margin:
            margin = share
        if k >= limit:
            pv = binom_sf(k, n, p)
            if fail_j is None or pv < best_p:
                fail_j, best_p = j, pv
    stats.update(rungs=rungs, margin=margin)
    if fail_j is None:
        return BandResult(True, f"within eager's noise band (largest z {zmax:.3g}, margin {margin:.3g}; "
                          f"c {c_used:.3g})",
                          stats, margin)
    t, k = ladder[fail_j], int(counts[fail_j])
    limit = smallest_failing_count(n, p0[fail_j], level) - 1
    stats["failed_rung"] = {"T": t, "count": k, "expected": n * p0[fail_j], "limit": limit, "p": best_p}
    ce, ee, gg, bb = worst
    msg = (f"{k} of {n} element(s) beyond {t:.3g}x their noise band (max(|eager - golden|, spread of {runs} "
           f"randomised-rounding run(s), u|golden|)); a correct computation up to {ratio:g}x eager's noise "
           f"puts {n * p0[fail_j]:.3g} there on average and at most {limit} at alpha {alpha:g} "
           f"(P = {best_p:.2g}); largest z {zmax:.3g} at element {zarg} (compiled {ce:.4g}, eager {ee:.4g}, "
           f"golden {gg:.4g}, band {bb:.3g})")
    return BandResult(False, msg, stats, margin)


# --- the band as eager's error in the existing per-octave MaxRel and small-value MaxAbs -----------------

BAND_KEYS = ("octave_max_abs.", "small_value_max_abs")


def band_surrogate(eager: torch.Tensor, golden: torch.Tensor, spread: torch.Tensor | None, *,
                   dtype: torch.dtype | None = None, abs_floor: float | None = None,
                   eager_golden: torch.Tensor | None = None) -> torch.Tensor:
    """golden + sign(eager - golden) x band, in fp64: an "eager" whose error at every element is its noise
    band (module docstring) instead of the one draw eager happened to make. Fed to the existing per-octave
    MaxRel (`octave_reference`), it keeps that rule's population evidence (an octave where eager and its
    perturbed runs are all within an ulp is accurate, so a few elements 10% off there still fail) while an
    octave where eager was merely lucky is judged against the spread of its noise."""
    dtype = dtype or eager.dtype
    e, g = eager.double(), golden.double()
    err = (e - g).abs()
    if eager_golden is not None:
        err = torch.maximum(err, (e - eager_golden.double()).abs())
    floor = float(abs_floor) if abs_floor is not None else torch.finfo(dtype).tiny
    band = torch.maximum(err, g.abs() * unit_roundoff(dtype)).clamp_min(floor)
    if spread is not None:
        band = torch.maximum(band, spread.double().nan_to_num(0.0))
    sign = torch.where(e >= g, 1.0, -1.0).to(torch.float64)
    return torch.where(torch.isfinite(e) & torch.isfinite(g), g + sign * band, e)


def octave_reference(reference_vs_golden, eager: torch.Tensor, golden: torch.Tensor,
                     spread: torch.Tensor | None, *, applied, dtype: torch.dtype | None = None,
                     eager_golden: torch.Tensor | None = None):
    """`reference_vs_golden` (eager's Metrics against the golden) with its per-octave largest errors and its
    small-value MaxAbs raised to those of the band (`band_surrogate`); every other metric (RMSE, MeanRel, the
    small-value count) stays eager's own. `applied`: the row's `Comparison.applied` (thresholds at its
    scale). Pass the result as `compare(..., reference_vs_golden=...)`. Same pattern as rows.py's
    `_octaves_of_both`."""
    from fusecheck.compare.metrics import Metrics, pair_metrics
    dtype = dtype or eager.dtype
    surrogate = band_surrogate(eager, golden, spread, dtype=dtype, eager_golden=eager_golden)
    banded = pair_metrics(surrogate, golden.double(), ulp_dtype=dtype, rtol=applied.tolerance.rtol,
                          atol=applied.tolerance.atol, small_threshold=applied.small_threshold)
    values = dict(reference_vs_golden.values)
    for k, v in banded.values.items():
        if k.startswith(BAND_KEYS):
            values[k] = max(values.get(k, 0.0), v)
    return Metrics(values)
