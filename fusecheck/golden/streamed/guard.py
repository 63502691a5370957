"""What makes the streamed golden see the model as the whole-model fp64 copy sees it, or step aside.

During the streamed golden a piece's weights are fp64 copies only while the piece runs; everywhere else the
model still holds its own run-dtype (bf16...) tensors, the *originals*. Code that reaches an original from
outside its piece would see a difference the whole copy does not have: `self.dtype`, `x.to(w.dtype)`,
`torch.finfo(p.dtype)`, `torch.zeros(..., dtype=self.dtype)`, `x.type_as(w)`, `F.linear(h, embed.weight)` at the
root, a parameter passed to a block, a hook reading its block's weight. The guard removes that difference:

- **The originals answer as their fp64 copies.** Each original's `__class__` is swapped, for the run, to a
  subclass whose `__torch_function__` answers `dtype`, `itemsize`, `element_size()`, `nbytes`, `type()` (and
  `device`, `is_cuda`... when the golden runs on another device) as the whole copy's tensor would, without a
  copy; shape-like reads pass through; every other torch call gets an fp64 copy of the original instead
  (the values of the whole copy, exactly: an upcast is exact). Only the originals carry the subclass, so no
  other tensor, and no `has_torch_function` check (the fast paths of nn.MultiheadAttention), changes.
- **Whatever still reaches an original is a leak** (`StreamedLeak`): writing to it (an in-place op, `out=`,
  a setter), or an aten op that consumes it (torch function disabled, a custom autograd Function's saved
  tensor): a dispatch mode above every other watches for originals in the arguments of every op.

Subclass swaps are safe for torch: plain `torch.Tensor` and `nn.Parameter` (and parameter subclasses that
neither override `__torch_function__` nor `__torch_dispatch__`) have the same instance layout as a Python
subclass, C++ never reads the Python type, and the C++ dtype is untouched. Other tensor subclasses
(DTensor under FSDP2 or tensor parallelism) are left alone. fusecheck's own reads of originals (making the
copies) run under `internal()`.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch._ops import HigherOrderOperator
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from fusecheck.runs.cast import COMPLEX_OF
from fusecheck.golden.streamed.internal import internal, is_internal


class StreamedLeak(RuntimeError):
    """The streamed golden cannot be the whole-model golden for this model: it must step aside."""

    def __init__(self, message: str, names: tuple[str, ...] = ()):
        super().__init__(message)
        self.names = names


# reads that are the same for an original and its whole-copy counterpart: answered by the original itself
_SAME = frozenset({
    "shape", "size", "dim", "ndim", "numel", "stride", "storage_offset", "is_contiguous", "layout",
    "requires_grad", "is_leaf", "grad_fn", "grad", "_version", "names", "name", "is_floating_point",
    "is_complex", "is_signed", "data_ptr", "untyped_storage", "_base", "_is_view", "is_sparse",
    "is_quantized", "is_meta", "is_nested", "is_mkldnn", "is_inference", "output_nr", "__hash__", "__len__",
    "_cdata", "_typed_storage", "__class__", "__dict__", "_post_accumulate_grad_hooks", "_backward_hooks",
})
_DTYPE = frozenset({"dtype", "itemsize", "element_size", "nbytes", "type"})
_DEVICE = frozenset({"device", "is_cuda", "is_cpu", "get_device", "is_mps", "is_xpu"})
_WRITES = frozenset({"__setitem__", "__delitem__", "retain_grad", "register_hook",
                     "register_post_accumulate_grad_hook", "backward", "__iadd__", "__isub__", "__imul__",
                     "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__",
                     "__ilshift__", "__irshift__", "__imatmul__"})


def _name(func) -> tuple[str, str]:
    """(attribute or function name, "get"/"set"/"call")."""
    n = getattr(func, "__name__", "")
    if n in ("__get__", "__set__", "__delete__"):
        d = getattr(func, "__self__", None)
        attr = getattr(d, "__name__", None) or getattr(getattr(d, "fget", None), "__name__", "?")
        return attr, n[2:-2]
    return n, "call"


def golden_dtype_of(t: torch.Tensor, dtype: torch.dtype) -> torch.dtype:
    """The dtype `t` has in the whole-model golden copy (`model.to(dtype)`)."""
    with torch._C.DisableTorchFunctionSubclass():
        real = t.dtype
    if real.is_complex and dtype in COMPLEX_OF:
        return COMPLEX_OF[dtype]
    return dtype if real.is_floating_point else real


def eligible(t: torch.Tensor, device: torch.device | None = None) -> bool:
    """Plain tensors and parameters (not DTensor or other subclasses), floating or complex, or on another
    device than the golden's (an integer buffer, position ids: the whole copy has it on `device`)."""
    cls = type(t)
    if cls is not torch.Tensor and not (
            isinstance(t, torch.nn.Parameter)
            and cls.__torch_function__ is torch._C._disabled_torch_function_impl
            and cls.__torch_dispatch__ is torch._C._disabled_torch_dispatch_impl):
        return False
    with torch._C.DisableTorchFunctionSubclass():
        return t.is_floating_point() or t.is_complex() or (device is not None and t.device != device)


class Guard(contextlib.AbstractContextManager):
    """Within the block the originals (`tensors`: {name: tensor}) read as their `dtype` (fp64) copies on
    `device` and are substituted by such copies in every torch call; writes to them and aten ops that still
    consume them raise `StreamedLeak`.

    `substitute(original) -> copy` makes the copy (default: a detached upcast); the streamed golden's own
    makes autograd leaves there whose gradients reach the sink (fusecheck/golden/streamed/golden.py).
    """

    def __init__(self, tensors: dict[str, torch.Tensor], dtype: torch.dtype, device: torch.device | None = None,
                 substitute: Callable[[torch.Tensor], torch.Tensor] | None = None):
        from fusecheck.golden.streamed.upcast import upcast_tensor
        if device is not None:  # as tensors report it ("cuda" -> "cuda:0"), so that reads compare equal
            device = torch.empty(0, device=device).device
        self.dtype, self.device = dtype, device
        self.names: dict[int, str] = {}
        self.originals: dict[int, torch.Tensor] = {}
        for name, t in tensors.items():
            if id(t) not in self.originals and eligible(t, device):
                self.originals[id(t)] = t
                self.names[id(t)] = name
        self.substitute = substitute or (lambda t: upcast_tensor(t, dtype, device))
        self.leaks: list[str] = []
        self._classes: dict[type, type] = {}
        self._swapped: list[tuple[torch.Tensor, type]] = []
        self._watch: _Watch | None = None

    def __enter__(self) -> "Guard":
        try:
            for t in self.originals.values():
                cls = type(t)
                t.__class__ = self._shim_class(cls)
                self._swapped.append((t, cls))
            if self._swapped:
                self._watch = _Watch(self)
                self._watch.__enter__()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            self._watch = None
        for t, cls in reversed(self._swapped):
            t.__class__ = cls
        self._swapped.clear()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Code of fusecheck's own inside the run (the sink): originals are plain tensors to it."""
        with internal():
            yield

    def name(self, t: torch.Tensor) -> str:
        return self.names.get(id(t), "a model tensor")

    def leak(self, message: str, names: tuple[str, ...] = ()) -> StreamedLeak:
        self.leaks.append(message)
        return StreamedLeak(message, names)

    def check(self) -> None:
        """A leak that model code swallowed (a try/except around it) still ends the streamed golden."""
        if self.leaks:
            raise StreamedLeak(self.leaks[0])

    def is_original(self, x: Any) -> bool:
        return isinstance(x, torch.Tensor) and id(x) in self.originals

    def swap_in_copies(self, tree: Any) -> Any:
        """Every original in a pytree replaced by its copy (one copy per original)."""
        memo: dict[int, torch.Tensor] = {}

        def leaf(x):
            if isinstance(x, torch.Tensor) and id(x) in self.originals:
                if id(x) not in memo:
                    memo[id(x)] = self.substitute(x)
                return memo[id(x)]
            return x
        return pytree.tree_map(leaf, tree)

    # -- the originals' torch function ---------------------------------------------------------------
    def _shim_class(self, cls: type) -> type:
        if cls not in self._classes:
            guard = self

            def __torch_function__(klass, func, types, args=(), kwargs=None):
                return guard._torch_function(func, args, kwargs or {})
            self._classes[cls] = type(f"Golden{cls.__name__}", (cls,),
                                      {"__torch_function__": classmethod(__torch_function__),
                                       "__module__": __name__})
        return self._classes[cls]

    def _torch_function(self, func, args, kwargs):
        if is_internal():
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        name, kind = _name(func)
        first = args[0] if args else None
        if kind == "get" or (kind == "call" and first is not None and self.is_original(first)):
            if name in _DTYPE and self.is_original(first) and (kind == "get" or not args[1:] and not kwargs):
                return self._dtype_read(name, first)
            if name in _DEVICE and self.device is not None and self.is_original(first) and (
                    kind == "get" or not args[1:] and not kwargs):
                return self._device_read(name)
            if name in _SAME:
                with torch._C.DisableTorchFunctionSubclass():
                    return func(*args, **kwargs)
        if kind in ("set", "delete") and self.is_original(first):
            if name == "grad" and len(args) > 1 and args[1] is None:  # run_once clears gradients
                with torch._C.DisableTorchFunctionSubclass():
                    return func(*args, **kwargs)
            raise self.leak(f"the model sets {name!r} of {self.name(first)}", (self.name(first),))
        if self.is_original(first) and (name in _WRITES or (name.endswith("_") and not name.endswith("__"))):
            raise self.leak(f"the model writes to {self.name(first)} ({name})", (self.name(first),))
        if self.is_original(kwargs.get("out")):
            raise self.leak(f"the model writes to {self.name(kwargs['out'])} (out=)", (self.name(kwargs["out"]),))
        args, kwargs = self.swap_in_copies((args, kwargs))
        return func(*args, **kwargs)

    def _dtype_read(self, name: str, t: torch.Tensor):
        dtype = golden_dtype_of(t, self.dtype)
        if name == "dtype":
            return dtype
        size = dtype.itemsize
        if name in ("itemsize", "element_size"):
            return size
        if name == "nbytes":
            with torch._C.DisableTorchFunctionSubclass():
                return t.numel() * size
        with internal():  # type(): the tensor type string of the copy, e.g. torch.DoubleTensor
            return torch.empty(0, dtype=dtype, device=self.device or t.device).type()

    def _device_read(self, name: str):
        dev = self.device
        return {"device": dev, "is_cuda": dev.type == "cuda", "is_cpu": dev.type == "cpu",
                "is_mps": dev.type == "mps", "is_xpu": dev.type == "xpu",
                "get_device": -1 if dev.type == "cpu" else (dev.index or 0)}[name]


class _Watch(TorchDispatchMode):
    """Above every other mode during the streamed golden: an aten op that consumes an original (torch
    function was bypassed) is a leak."""

    supports_higher_order_operators = True

    def __init__(self, guard: Guard):
        super().__init__()
        self.guard = guard

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not is_internal() and not isinstance(func, HigherOrderOperator):
            originals = self.guard.originals
            for x in (*args, *kwargs.values()):
                hit = None
                if isinstance(x, torch.Tensor):
                    hit = x if id(x) in originals else None
                elif isinstance(x, (list, tuple)):
                    hit = next((y for y in x if isinstance(y, torch.Tensor) and id(y) in originals), None)
                if hit is not None:
                    g = self.guard
                    raise g.leak(f"{func} consumes {g.name(hit)} in its run dtype (a path torch function does "
                                 "not see: a custom autograd Function's saved tensor, torch function disabled)",
                                 (g.name(hit),))
        return func(*args, **kwargs)
