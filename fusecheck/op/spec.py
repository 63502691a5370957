"""How a kernel engineer describes a single-device fused op to `fusecheck op`: one small class per kernel.

The shape of `fusecheck.distributed.DistSpec`, minus the communication: inputs are a dict of tensors made by
a pure function, `reference` is the unfused chain of torch ops (the tool runs it eager in the op dtype, and in
fp64 as the golden), `fused` the implementation under test. The tool never looks inside either.
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Iterator

import torch

from fusecheck.case import TargetError, load_object


class SpecError(TargetError):
    """The spec is wrong, not the kernel: a bad reference, arguments, inputs, or a method that raises. Exit 2."""


class KernelError(RuntimeError):
    """`fused` raised: the implementation under test broke (exit 3, like a backend that raises in `check`)."""


def seeded_randn(shape, seed: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    """Normal values that depend only on (shape, seed): drawn in fp32 and cast, so every dtype sees the same
    values up to rounding (what `make_inputs` needs to be a pure function)."""
    g = torch.Generator().manual_seed(int(seed) % 2 ** 63)
    return (torch.randn(shape, generator=g, dtype=torch.float32) * scale).to(dtype)


class OpSpec:
    """Base class for a fused single-device op. Override `shapes` and the three methods below.

    `special_inputs`: which inputs take the NaN/Inf probes and what propagation the op promises for each, as
    {input name: promise} with promises from `fusecheck.op.probes.PROPAGATION` ("exact": NaN/+Inf/-Inf at
    the golden's positions and of its kinds; "positions": non-finite where the golden is, of any kind; None:
    no probe for that input). None (the default): every floating input, "exact".
    """

    #: shape dicts handed to `make_inputs`; include ones that do not divide the kernel's tile/chunk
    shapes: list[dict[str, int]] = []
    #: dtypes checked when --dtype is not given
    dtypes: tuple[str, ...] = ("fp32", "bf16", "fp16")
    special_inputs: dict[str, str | None] | None = None
    #: inputs that get gradients with --train (None: every floating input)
    grad_inputs: tuple[str, ...] | None = None

    def make_inputs(self, shape: dict[str, int], dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
        """The op's inputs in `dtype`; a pure function of the arguments (`seeded_randn` helps)."""
        raise NotImplementedError

    def reference(self, **inputs: torch.Tensor):
        """The unfused chain of torch ops, in the dtype of its inputs (called in the op dtype and in fp64)."""
        raise NotImplementedError

    def fused(self, **inputs: torch.Tensor):
        """The fused kernel under test."""
        raise NotImplementedError

    def describe(self) -> str:
        """One line for the report: the spec's class and its tiling (override to say more)."""
        return type(self).__name__


@contextlib.contextmanager
def spec_folder_on_path(ref: str) -> Iterator[None]:
    """The spec file's folder on sys.path while the op runs: specs import their neighbours (a kernel module
    beside them), at import time or lazily inside `fused`."""
    where = ref.rpartition(":")[0]
    folder = str(Path(where).resolve().parent) if where.endswith(".py") else None
    added = folder is not None and folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def spec_class(ref: str) -> type[OpSpec]:
    """The class named by `path/to/file.py:Class` (or `package.module:Class`); SpecError otherwise."""
    if ":" not in ref:
        raise SpecError(f"spec reference {ref!r} must look like path/to/kernel.py:ClassName")
    with spec_folder_on_path(ref):
        obj = load_object(ref)
    if not (isinstance(obj, type) and issubclass(obj, OpSpec)):
        raise SpecError(f"{ref} is not a fusecheck.op.OpSpec subclass")
    return obj


def load_spec(ref: str, spec_args: list[str] = ()) -> OpSpec:
    """Instantiate `ref` with `--spec-arg key=value` strings, typed by the constructor's annotations."""
    from fusecheck.distributed.spec import SpecError as DistSpecError, typed_spec_args
    cls = spec_class(ref)
    try:
        kwargs, unknown = typed_spec_args(cls, list(spec_args))
    except DistSpecError as exc:
        raise SpecError(str(exc)) from None
    if unknown:
        raise SpecError(f"--spec-arg {', '.join(sorted(unknown))}: {cls.__name__}'s constructor does not take it")
    try:
        return cls(**kwargs)
    except Exception as exc:
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise SpecError(f"{ref}({args}) raised {type(exc).__name__}: {exc}") from None


def spec_name(spec: OpSpec) -> str:
    return type(spec).__name__


def make_inputs(spec: OpSpec, shape: dict, dtype: torch.dtype, seed: int, device: torch.device) -> dict:
    """The spec's inputs, checked (a dict of tensors, names that are identifiers) and moved to `device`."""
    where = f"{spec_name(spec)}.make_inputs({shape}, {str(dtype).removeprefix('torch.')}, seed={seed})"
    try:
        made = spec.make_inputs(dict(shape), dtype, seed)
    except Exception as exc:
        raise SpecError(f"{where} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(made, dict) or not made:
        raise SpecError(f"{where} returned {type(made).__name__}, not a non-empty dict of tensors")
    bad = [k for k, v in made.items() if not isinstance(k, str) or not k.isidentifier()]
    if bad:
        raise SpecError(f"{where}: input names must be Python identifiers (they are keyword arguments): {bad}")
    if not any(isinstance(v, torch.Tensor) for v in made.values()):
        raise SpecError(f"{where} returned no tensor")
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in made.items()}


def outputs(result: Any, who: str) -> dict[str, torch.Tensor]:
    """A result as named tensors: a tensor is `output`; a tuple/list `output.0`, ...; a dict `output.<key>`."""
    if isinstance(result, torch.Tensor):
        return {"output": result}
    if isinstance(result, (tuple, list)) and result:
        return {f"output.{i}": v for i, v in enumerate(result)}
    if isinstance(result, dict) and result:
        return {f"output.{k}": v for k, v in result.items()}
    raise SpecError(f"{who} returned {type(result).__name__}: expected a tensor, a tuple/list or a dict of tensors")
