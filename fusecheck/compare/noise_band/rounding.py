"""Randomised rounding of eager at op level (Monte Carlo arithmetic): every floating op output moved to a
neighbour at random, fp32 reductions reassociated, discrete decisions replayed from a first recording, so a
perturbed run differs from eager exactly where a correct compiler may. The why: the package docstring."""
from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode


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
    if discrete_from_float(func, args, out):
        return out
    return None


DECISION_OPS = frozenset({"topk", "sort", "argmax", "argmin", "max", "min", "max_pool2d_with_indices",
                          "relu", "threshold_backward", "hardtanh_backward"})
ROUNDED_TO_INTEGERS = frozenset({"floor", "ceil", "round", "trunc"})


def discrete_from_float(func, args, out) -> bool:
    """Any other op that turns floating values into a discrete result is a decision too: an integer or bool
    tensor from floating inputs (a cast to an index, a comparison, bucketize) or floats rounded to integers.
    Why: a perturbed run that moves a value across an integer boundary picks another index (T5's relative
    position buckets are `log(...).to(torch.long)`), and the band would measure that jump, not rounding."""
    if not isinstance(out, torch.Tensor):
        return False
    if (out.is_floating_point() or out.is_complex()) and _name(func) not in ROUNDED_TO_INTEGERS:
        return False  # most ops: decided without flattening the arguments (this runs on every op)
    return any(x.is_floating_point() for x in _tensors(args))


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
    if discrete_from_float(func, args, out):
        if func._opname.endswith("_"):
            x.copy_(recorded)
            return x
        return recorded.clone()
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


# reductions whose result does not depend on the order of the reduced index: run on a permuted copy, each is an
# independent draw of its accumulation error (the compiled kernel's split or tiling is another)
REDUCTIONS = frozenset({"sum", "mean", "nansum", "nanmean", "var", "var_mean", "std", "std_mean", "logsumexp",
                        "linalg_vector_norm"})
_CONTRACTIONS = ("mm", "addmm", "bmm", "baddbmm")


def _reduced_dims(func, args, kwargs, ndim: int) -> list[int]:
    """The dims a reduction reduces: its schema's `dim` argument, all dims when absent, None or empty."""
    names = [a.name for a in func._schema.arguments]
    dims = None
    if "dim" in kwargs:
        dims = kwargs["dim"]
    elif "dim" in names and names.index("dim") < len(args):
        dims = args[names.index("dim")]
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    return [int(d) % ndim for d in ([dims] if isinstance(dims, int) else dims)]


def _reassociated_args(func, args, kwargs, gen) -> tuple | None:
    """Arguments with the reduced index permuted, or None (not a reduction this knows, or one whose result
    is not fp32: CPU and GPU kernels accumulate bf16/fp16 reductions in fp32, whose order changes far less
    than one output ulp, so the copy would buy nothing)."""
    name = _name(func)
    a = list(args)
    first = next(iter(_tensors(args)), None)
    if first is None or first.dtype is not torch.float32 or kwargs.get("dtype") not in (None, torch.float32):
        return None
    if name in _CONTRACTIONS and not func._opname.endswith("_"):
        i = 1 if name in ("addmm", "baddbmm") else 0
        x, y = a[i], a[i + 1]
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)) or x.layout != torch.strided:
            return None
        kdim = x.dim() - 1
        p = _perm(x.shape[kdim], gen, x.device)
        a[i], a[i + 1] = x.index_select(kdim, p), y.index_select(kdim - 1, p)
        return tuple(a)
    if name in REDUCTIONS and isinstance(a[0], torch.Tensor) and a[0].layout == torch.strided:
        x = a[0]
        if x.dim() == 0:
            return None
        for d in _reduced_dims(func, args, kwargs, x.dim()):
            if x.shape[d] > 1:
                x = x.index_select(d, _perm(x.shape[d], gen, x.device))
        a[0] = x
        return tuple(a)
    return None


# --- composite ops: run as the compiler's decomposition, so their inner roundings are perturbed too ------

@functools.cache
def composite_decompositions() -> dict:
    """The composite ops of Inductor's own decomposition table (layer/group/batch norm, softmax and their
    backwards, losses, embedding backward, ...) -> their decomposition. Why: such an op rounds and reduces
    inside one ATen kernel (a layer norm's mean and variance), where output rounding alone never reaches,
    and a compiler runs exactly this decomposition instead, fused, in its own order: a row mean's rounding
    error moves every element of the row alike, which no per-element flip of the output imitates (a layer
    norm of rows offset by 300: Inductor's compile has eager's error, an output-rounding band is ~1000x
    narrower than that row error and fails it at margin ~100, the decomposed band passes it). Left out: pointwise ops (one rounding each), exact and decision ops, the
    reductions and contractions that are reassociated instead, mutating and seeded-random ops. Empty where
    Inductor's table cannot be read (a torch without it): the band is then output rounding, as before."""
    try:
        from torch._inductor.decomposition import select_decomp_table
        table = select_decomp_table()
    except Exception:  # noqa: BLE001 -- any torch without the table: no decomposition, never an error
        return {}
    keep = {}
    for op, fn in table.items():
        if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten" or op._schema.is_mutable:
            continue
        name = _name(op)
        if (torch.Tag.pointwise in op.tags or torch.Tag.nondeterministic_seeded in op.tags or name in EXACT_OPS
                or name in DECISION_OPS or name in _CONVERSIONS or name in REDUCTIONS or name in _CONTRACTIONS
                or name.startswith(("linalg_", "fft_", "_sparse", "sparse_", "to_sparse", "is_", "sym_"))):
            continue
        keep[op] = fn
    return keep


class RandomRounding(TorchDispatchMode):
    """Monte Carlo arithmetic at op level (see the module docstring). `perturb=False` with `record=True`
    runs every op unchanged and records the decisions (the reference run); `replay` (a recording) pins a
    perturbed run's decisions to it. `dtype`: only outputs of that dtype are perturbed (None: fp16, bf16 and
    fp32 alike, each at its own precision). `decompose`: composite ops run as `composite_decompositions()`
    (in the reference run too, so that both see the same decisions)."""

    def __init__(self, seed: int = 0, *, flip: float = 0.125, reassociate: bool = True, perturb: bool = True,
                 record: bool = False, replay: list | None = None, dtype: torch.dtype | None = None,
                 decompose: bool = True):
        super().__init__()
        self.decompositions = composite_decompositions() if decompose else {}
        self.decomposed_ops = 0
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
        decomposition = self.decompositions.get(func)
        if decomposition is not None:
            with self:  # its parts come back through this mode: rounded, reassociated, decided like any op
                out = decomposition(*args, **kwargs)
            if out is not NotImplemented:
                self.decomposed_ops += 1
                return out
        name = _name(func)
        if self.perturb and self.reassociate:
            moved = _reassociated_args(func, args, kwargs, self._gen(_device_of(args)))
            if moved is not None:
                args = moved
                self.reassociated_ops += 1
        out = func(*args, **kwargs)
        if (self.recording is not None or self.replay is not None) and (
                name in DECISION_OPS or discrete_from_float(func, args, out)):
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
