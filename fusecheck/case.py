"""What the user checks: a model plus example inputs, loaded from `FILE.py:NAME`.

A target function returns a `Case` or a `(model, inputs)` tuple; `inputs` may be one tensor or a tuple.
Loading problems raise `TargetError`, which the CLI maps to exit code 2 (bad input), never to a verdict;
`refuse_meta` is one of them (a model or inputs on the meta device have no values to check).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

DEFAULT_TARGET = str(Path(__file__).resolve().parent / "builtin" / "transformer_block.py") + ":build"


from fusecheck.errors import TargetError  # noqa: E402,F401  (raised here; defined with its exit code)


@dataclass
class Case:
    """A model and the example inputs it is checked on. `kwargs` are passed to the model too."""

    model: Callable[..., Any]
    inputs: tuple[Any, ...]
    name: str = "case"
    kwargs: dict[str, Any] = field(default_factory=dict)


def as_case(obj: Any, name: str = "case") -> Case:
    if isinstance(obj, Case):
        return obj
    if isinstance(obj, tuple) and len(obj) == 2 and callable(obj[0]):
        model, inputs = obj
        inputs = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
        return Case(model, tuple(inputs), name)
    if obj is None:
        raise TargetError(f"target {name!r} returned nothing; it must return a fusecheck.case.Case or (model, inputs)")
    raise TargetError(f"target {name!r} returned {type(obj).__name__}; expected a Case or a (model, inputs) tuple")


@contextlib.contextmanager
def importable(*dirs: Path):
    """`dirs` on sys.path for the duration (those not there already), removed after."""
    added = [str(d) for d in dirs if str(d) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for d in added:
            sys.path.remove(d)


def _target_dirs(spec: str) -> tuple[Path, ...]:
    """Where a target's imports resolve while it loads and builds: the working directory (as under
    `python -m`: a file in a project imports the project's packages, also lazily when it builds), and a
    file target's own folder (its sibling modules)."""
    where = spec.rpartition(":")[0]
    return (Path.cwd(), *([Path(where).resolve().parent] if where.endswith(".py") else []))


def load_object(spec: str) -> Any:
    """Resolve `path/to/file.py:NAME` or `package.module:NAME` to the named object."""
    if ":" not in spec:
        raise TargetError(f"{spec!r}: expected FILE.py:NAME or module:NAME")
    where, _, attr = spec.rpartition(":")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise TargetError(f"{spec!r}: file {where} not found")
        mod_name = f"fusecheck_target_{abs(hash(str(path.resolve())))}"
        module_spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[mod_name] = module
        with importable(path.resolve().parent):
            try:
                module_spec.loader.exec_module(module)
            except Exception as exc:  # the user's file failed to import
                raise TargetError(f"{spec!r}: importing {where} failed: {type(exc).__name__}: {exc}") from exc
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise TargetError(f"{spec!r}: cannot import {where}: {exc}") from exc
    if not hasattr(module, attr):
        raise TargetError(f"{spec!r}: {where} has no attribute {attr!r}")
    return getattr(module, attr)


def _meta_tensors(obj: Any, path: str, found: list[str], depth: int = 0) -> None:
    if isinstance(obj, torch.Tensor):
        if obj.is_meta:
            found.append(path)
    elif depth < 4 and isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            _meta_tensors(x, f"{path}[{i}]", found, depth + 1)
    elif depth < 4 and isinstance(obj, dict):
        for k, x in obj.items():
            _meta_tensors(x, f"{path}[{k!r}]", found, depth + 1)


def refuse_meta(case: Case) -> None:
    """A model or input on the meta device has shapes but no values: nothing to run or compare. One
    TargetError (exit 2) naming what is on meta and what to do, instead of a traceback from deep in a run.
    (A sharded check, `--nproc N`, builds on meta on purpose and initialises each rank's shard.)"""
    found: list[str] = []
    model = case.model
    if isinstance(model, torch.nn.Module):
        found += [f"parameter {n}" for n, t in model.named_parameters() if t.is_meta][:3]
        found += [f"buffer {n}" for n, t in model.named_buffers() if t.is_meta][:3]
        if found:
            raise TargetError(f"case {case.name!r}: the model is on the meta device ({', '.join(found[:3])}): it "
                              "has shapes but no values to check; build it on a real device (cpu, cuda), or, for "
                              "a model too large for one device, shard it with `fusecheck check --nproc N`, "
                              "which initialises each rank's shard")
    for i, x in enumerate(case.inputs):
        _meta_tensors(x, f"input {i}", found)
    for k, x in case.kwargs.items():
        _meta_tensors(x, f"keyword input {k!r}", found)
    if found:
        raise TargetError(f"case {case.name!r}: {', '.join(found[:3])}: on the meta device, a shape with no "
                          "values to run; build the inputs on a real device (cpu, cuda) with real values")


def load_target(spec: str | None = None, seed: int = 0) -> Case:
    """Load and build the case named by `spec` (the built-in transformer block when None), seeded."""
    spec = spec or DEFAULT_TARGET
    with importable(*_target_dirs(spec)):
        return _load_target(spec, seed)


def _load_target(spec: str, seed: int) -> Case:
    builder = load_object(spec)
    name = spec.rpartition(":")[2] if spec != DEFAULT_TARGET else "transformer_block"
    if isinstance(builder, (Case, tuple)):
        return as_case(builder, name)
    if not callable(builder):
        raise TargetError(f"{spec!r} is not callable and not a case")
    torch.manual_seed(seed)
    try:
        built = builder()
    except Exception as exc:
        raise TargetError(f"{spec!r}: building the case raised {type(exc).__name__}: {exc}") from exc
    case = as_case(built, name)
    if case.name == "case":
        case.name = name
    return case
