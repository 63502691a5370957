"""How a user describes a fused comm+compute op to `fusecheck dist`: one small class per kernel.

The tool never looks inside the kernel; it only calls these methods, so it works on kernels it has never
seen. Every method is called on every rank with that rank's own inputs and the same process group.
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch


def seeded_randn(shape, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """Normal values that depend only on (shape, seed): what `make_inputs` needs to be a pure function.
    Drawn in fp32 and cast, so every dtype sees the same values up to rounding."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32).to(dtype)


class DistSpec:
    """Base class for a fused distributed op. Override the attributes and the six methods below.

    Inputs are dicts of tensors so that the tool can cast them (fp64 golden) and poison them (NaN/Inf
    propagation) without knowing the op.
    """

    #: key of `fusecheck.dist.COLLECTIVES` ("all_gather", "all_reduce", "reduce_scatter", "all_to_all_single")
    collective: str = ""
    #: tile/chunk parameters; recorded in the report and used by every mode (fused, identity compute, identity comm)
    tiling: dict[str, Any] = {}
    #: default shapes (dicts handed to `make_inputs`); include ones that do not divide the chunk size
    shapes: list[dict[str, int]] = []
    #: outputs must be bitwise identical on every rank (e.g. anything after an all_reduce)
    outputs_agree: bool = False
    #: backends the op can run on (empty: any); `requirement()` says what the others lack
    backends: tuple[str, ...] = ()
    #: modules the parent imports before it forks the ranks, so each rank does not pay for them again
    preload_modules: tuple[str, ...] = ()

    def make_inputs(self, shape: dict[str, int], rank: int, world: int, seed: int,
                    dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """This rank's inputs; must be a pure function of the arguments (the tool regenerates other ranks')."""
        raise NotImplementedError

    def comm_input(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The tensor the collective consumes in the unfused program (its shape/dtype/values, not the kernel's)."""
        raise NotImplementedError

    def fused(self, inputs: dict[str, torch.Tensor], group) -> torch.Tensor:
        """The fused kernel."""
        raise NotImplementedError

    def comm_only(self, x: torch.Tensor, group) -> torch.Tensor:
        """The fused kernel with its compute replaced by identity: same structure and chunking; `x` (shaped like
        `comm_input`) is what gets communicated; returns what the collective delivered to this rank."""
        raise NotImplementedError

    def compute_only(self, delivered: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The fused kernel with communication replaced by identity: same tiling; `delivered` is what the
        collective would have delivered to this rank (from the golden collective). Kernels whose compute comes
        before the collective (GEMM + reduce-scatter) return their local, pre-communication result."""
        raise NotImplementedError

    def compute_golden(self, delivered: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Plain torch ops for `compute_only`, in the dtype of its arguments (called in the op dtype and in fp64)."""
        raise NotImplementedError

    def golden(self, inputs: dict[str, torch.Tensor], group) -> torch.Tensor:
        """torch.distributed collective + torch ops for `fused`, in the dtype of `inputs` (op dtype and fp64)."""
        raise NotImplementedError

    # ---- optional ------------------------------------------------------------------------------------
    def block_rows(self, rows: int) -> int:
        """Rows per pipeline block of the communicated tensor; used to name blocks in layer-1 messages."""
        chunks = int(self.tiling.get("chunks", 1)) or 1
        return max(1, -(-rows // chunks))

    def requirement(self) -> str:
        return f"{type(self).__name__} supports backends {', '.join(self.backends) or 'any'}"


def load_spec(ref: str, **kwargs) -> DistSpec:
    """Instantiate `path/to/file.py:Class` (or `package.module:Class`) with `kwargs`."""
    if ":" not in ref:
        raise ValueError(f"spec reference {ref!r} must look like path/to/kernel.py:ClassName")
    where, _, cls_name = ref.rpartition(":")
    module = _load_module(where)
    try:
        cls = getattr(module, cls_name)
    except AttributeError:
        raise ValueError(f"{where} has no class {cls_name!r}") from None
    if not (isinstance(cls, type) and issubclass(cls, DistSpec)):
        raise ValueError(f"{ref} is not a fusecheck.dist.DistSpec subclass")
    return cls(**kwargs)


def _load_module(where: str):
    if where.endswith(".py"):
        path = Path(where).resolve()
        if not path.is_file():
            raise ValueError(f"spec file not found: {where}")
        name = "fusecheck_dist_spec_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
        if name in sys.modules and getattr(sys.modules[name], "__fusecheck_mtime__", None) == path.stat().st_mtime:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        module.__fusecheck_mtime__ = path.stat().st_mtime
        sys.modules[name] = module  # before exec: dataclasses and pickling look the module up
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(where)
