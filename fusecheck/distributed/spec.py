"""How a user describes a fused comm+compute op to `fusecheck dist`: one small class per kernel.

The tool never looks inside the kernel; it only calls these methods, so it works on kernels it has never
seen. Every method is called on every rank with that rank's own inputs and the same process group.
"""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import sys
import typing
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

    #: key of `fusecheck.distributed.COLLECTIVES` ("all_gather", "all_reduce", "reduce_scatter", "all_to_all_single")
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
    # tensors that take no NaN/Inf probe in layer 2 ("delivered" or names of make_inputs' tensors): inputs the
    # op promises nothing about when non-finite (e.g. a weight that every output element reads, turning the
    # golden all-NaN for reasons the kernel cannot help). Magnitude probes still run on them.
    no_nan_inf: tuple = ()

    def block_rows(self, rows: int) -> int:
        """Rows per pipeline block of the communicated tensor; used to name blocks in layer-1 messages."""
        chunks = int(self.tiling.get("chunks", 1)) or 1
        return max(1, -(-rows // chunks))

    def requirement(self) -> str:
        return f"{type(self).__name__} supports backends {', '.join(self.backends) or 'any'}"


class SpecError(ValueError):
    """The spec itself is wrong (not the kernel): a bad reference, arguments, or a method that raises. Exit 2."""


def spec_class(ref: str) -> type[DistSpec]:
    """The class named by `path/to/file.py:Class` (or `package.module:Class`)."""
    if ":" not in ref:
        raise SpecError(f"spec reference {ref!r} must look like path/to/kernel.py:ClassName (or a .py file or a "
                        "folder, for every spec in it)")
    where, _, cls_name = ref.rpartition(":")
    module = _load_module(where)
    try:
        cls = getattr(module, cls_name)
    except AttributeError:
        raise SpecError(f"{where} has no class {cls_name!r}") from None
    if not (isinstance(cls, type) and issubclass(cls, DistSpec)):
        raise SpecError(f"{ref} is not a fusecheck.distributed.DistSpec subclass")
    return cls


def load_spec(ref: str, **kwargs) -> DistSpec:
    """Instantiate `path/to/file.py:Class` (or `package.module:Class`) with `kwargs`."""
    cls = spec_class(ref)
    try:
        return cls(**kwargs)
    except Exception as exc:   # a bad argument (TypeError) or a constructor that raises: the spec's error
        raise SpecError(f"{ref}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())}) raised "
                        f"{type(exc).__name__}: {exc}") from None


def expand_targets(targets: list[str]) -> list[tuple[str, bool]]:
    """`file.py:Class` refs from the command line's targets: a ref stays as it is; a .py file or a folder
    (its *.py files, sorted) gives every spec class defined in it. Returns (ref, named explicitly)."""
    out = []
    for target in targets:
        path = Path(target)
        if ":" in target and not path.exists():
            out.append((target, True))
        elif path.is_dir():
            files = sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
            found = [(ref, False) for f in files for ref in _specs_or_broken(f)]
            if not found:
                raise SpecError(f"{target}: no DistSpec subclasses in its *.py files")
            out += found
        elif path.suffix == ".py":
            if not path.is_file():
                raise SpecError(f"spec file not found: {target}")
            found = specs_in_file(path)
            if not found:
                raise SpecError(f"{target} defines no DistSpec subclass")
            out += [(ref, False) for ref in found]
        else:
            raise SpecError(f"spec reference {target!r} must look like path/to/kernel.py:ClassName, a .py file "
                            "or a folder")
    seen: set[str] = set()   # a spec named twice (or by its file and by a folder) is checked once
    return [(ref, explicit) for ref, explicit in out if not (ref in seen or seen.add(ref))]


def _specs_or_broken(path: Path) -> list[str]:
    """A folder's file: its specs, or, when it cannot be imported, one ref (`file.py:`) that fails to load
    again when planned, so that it becomes an ERROR row beside the others rather than ending the command."""
    try:
        return specs_in_file(path)
    except SpecError:
        return [f"{path}:"]


def specs_in_file(path: Path) -> list[str]:
    """Refs of the concrete spec classes a file defines (not imported ones; no `_Private` bases; a collective)."""
    module = _load_module(str(path))
    return [f"{path}:{name}" for name, obj in vars(module).items()
            if isinstance(obj, type) and issubclass(obj, DistSpec) and obj is not DistSpec
            and obj.__module__ == module.__name__ and not name.startswith("_") and obj.collective]


def typed_spec_args(cls: type[DistSpec], items: list[str]) -> tuple[dict[str, Any], set[str]]:
    """`key=value` strings -> constructor kwargs typed by the constructor's annotations (int, float, bool, str;
    anything else, or no annotation, parses the value as JSON, falling back to the plain string). Returns the
    kwargs this class accepts and the keys it does not."""
    params = inspect.signature(cls).parameters
    open_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:
        hints = {}
    kwargs, unknown = {}, set()
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"--spec-arg {item!r} must be key=value")
        if key not in params and not open_kwargs:
            unknown.add(key)
            continue
        param = params.get(key)
        kind = hints.get(key)
        if kind is None and param is not None and param.default not in (inspect.Parameter.empty, None):
            kind = type(param.default)
        kwargs[key] = _convert(key, raw, kind)
    return kwargs, unknown


_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _convert(key: str, raw: str, kind) -> Any:
    try:
        if kind is bool:
            return _BOOLS[raw.strip().lower()]
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
        if kind is str:
            return raw
    except (KeyError, ValueError):
        raise SpecError(f"--spec-arg {key}={raw}: not a valid {kind.__name__}") from None
    try:
        return json.loads(raw)
    except ValueError:
        if kind is None:
            return raw
        raise SpecError(f"--spec-arg {key}={raw}: not a JSON value (the constructor expects {kind})") from None


def validate_spec(spec: DistSpec, ref: str, shapes: list[dict], world: int, seed: int, dtype: torch.dtype) -> None:
    """Call the spec's own parts once in the parent, before any rank starts: an unknown collective, a
    `make_inputs` or `comm_input` that raises or returns the wrong kind is the spec's error (exit 2), not a
    crash of the kernel."""
    from fusecheck.distributed.collectives import COLLECTIVES
    if spec.collective not in COLLECTIVES:
        raise SpecError(f"{ref}: collective {spec.collective!r} unknown; known: {', '.join(COLLECTIVES)}")
    if not isinstance(getattr(spec, "tiling", {}), dict):
        raise SpecError(f"{ref}: tiling must be a dict like {{'chunks': 3}}, not {spec.tiling!r}"[:300])
    if not shapes:
        raise SpecError(f"{ref} declares no shapes and none were given (--shape)")
    for shape in shapes:
        for rank in range(world):
            where = f"{ref}.make_inputs({shape}, rank={rank}, world={world}, seed={seed})"
            try:
                inputs = spec.make_inputs(dict(shape), rank, world, seed, dtype)
            except Exception as exc:
                raise SpecError(f"{where} raised {type(exc).__name__}: {exc}") from None
            if not isinstance(inputs, dict):
                raise SpecError(f"{where} returned {type(inputs).__name__}, not a dict of tensors")
            odd = {k: type(v).__name__ for k, v in inputs.items()
                   if not isinstance(v, (torch.Tensor, int, float, bool, str, type(None)))}
            if odd:   # a numpy array would reach the checker's own comparisons and crash a rank
                raise SpecError(f"{where} returned {odd} among its values: give tensors (torch.from_numpy)")
            try:
                x = spec.comm_input(inputs)
            except Exception as exc:
                raise SpecError(f"{ref}.comm_input(...) raised {type(exc).__name__}: {exc}") from None
            if not isinstance(x, torch.Tensor):
                raise SpecError(f"{ref}.comm_input(...) returned {type(x).__name__}, not a tensor")
            if x.is_floating_point() and x.dtype != dtype:   # a bf16 check would run the fp32 path
                raise SpecError(f"{where}: comm_input is {str(x.dtype).removeprefix('torch.')} where the op dtype is "
                                f"{str(dtype).removeprefix('torch.')}: make_inputs must make its tensors in the "
                                "dtype it is given")
            if x.numel() == 0:
                raise SpecError(f"{where}: comm_input has no elements (shape {tuple(x.shape)}): a shape with a zero "
                                "dimension leaves nothing to communicate or judge")
            unknown = sorted(set(getattr(spec, "no_nan_inf", ()) or ()) - {"delivered", *inputs})
            if unknown:   # a typo would silently keep the probe it meant to drop
                raise SpecError(f"{ref}: no_nan_inf names {unknown}, which are neither 'delivered' nor inputs of "
                                f"make_inputs ({', '.join(['delivered', *inputs])})")


def _load_module(where: str):
    if where.endswith(".py"):
        path = Path(where).resolve()
        if not path.is_file():
            raise SpecError(f"spec file not found: {where}")
        name = "fusecheck_dist_spec_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
        if name in sys.modules and getattr(sys.modules[name], "__fusecheck_mtime__", None) == path.stat().st_mtime:
            return sys.modules[name]
        folder = str(path.parent)
        if folder not in sys.path:   # a spec imports the modules beside it, as a script does (no PYTHONPATH)
            sys.path.insert(0, folder)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        module.__fusecheck_mtime__ = path.stat().st_mtime
        sys.modules[name] = module  # before exec: dataclasses and pickling look the module up
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise SpecError(f"importing {where} raised {type(exc).__name__}: {exc}") from None
        return module
    try:
        return importlib.import_module(where)
    except Exception as exc:
        raise SpecError(f"importing {where} raised {type(exc).__name__}: {exc}") from None
