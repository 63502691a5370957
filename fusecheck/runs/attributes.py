"""Module state held in plain attributes: tensors a module keeps outside its parameters and buffers.

Why: `self.k_cache = k`, an EMA kept in `self.ema = torch.zeros(...)` and updated in place, `self.cache =
[k, v]` are module state exactly as a buffer is, but `named_buffers` does not list them. Unseen, a run
started from the state the previous run left (eager looked nondeterministic, and a wrong compiled cache was
absorbed as eager's own drift: a +0.3 shift passed) and the state a run leaves was never judged. Here they
are found on every submodule (a tensor, or a list/tuple/dict holding tensors), saved, put back before each
run (an attribute a call created is removed again; one that was None or an empty list/dict gets that back)
and read after it as results ("mutated.state.<module>.<attr>").

What is shared stays shared: a tensor held by two attributes is saved, restored and cast once; a tensor
that is a view of a parameter or buffer is not copied (restoring those restores it), only put back if a
call reassigned the attribute.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

Slot = tuple[torch.nn.Module, str]  # (the module, the attribute's name)
# nn.Module's own bookkeeping (`_parameters`, `_buffers`, `_modules`, the hook dicts): never state here
_INTERNALS = frozenset(vars(torch.nn.Module()))


def _holds_tensors(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return not isinstance(value, torch.nn.Parameter)
    if isinstance(value, (list, tuple, dict)):
        leaves = pytree.tree_leaves(value)
        return (any(isinstance(v, torch.Tensor) for v in leaves)
                and not any(isinstance(v, (torch.nn.Module, torch.nn.Parameter)) for v in leaves))
    return False


def _vacant(value: Any) -> bool:
    """None or an empty list/dict: a slot a call may fill with state (`self.cos_cached = None`, a list of
    collected features)."""
    return value is None or (type(value) in (list, dict) and not value)


def _own(model: Any, keep: Callable[[Any], bool]) -> dict[str, Slot]:
    if not isinstance(model, torch.nn.Module):
        return {}
    found = {}
    for prefix, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr not in _INTERNALS and not attr.startswith("__") and keep(value):
                found[f"{prefix}.{attr}" if prefix else attr] = (module, attr)
    return found


def _opaque(value: Any) -> bool:
    """An object (not a module, tensor or container) whose own attributes hold tensors: a cache class such
    as transformers' DynamicCache kept on a module. Its state cannot be saved or put back generically."""
    if isinstance(value, (torch.nn.Module, torch.Tensor, list, tuple, dict, type)) or not hasattr(value, "__dict__"):
        return False
    return any(_holds_tensors(v) for v in vars(value).values())


def opaque_attributes(model: Any) -> list[str]:
    """The attributes holding such objects (said in the report: neither reset between runs nor judged)."""
    return [f"{name} ({type(getattr(m, attr)).__name__})" for name, (m, attr) in _own(model, _opaque).items()]


def attribute_slots(model: Any) -> dict[str, Slot]:
    """Every plain attribute holding tensors, by "<module path>.<attr>" (a shared module once)."""
    return _own(model, _holds_tensors)


def attribute_tensors(model: Any) -> dict[str, torch.Tensor]:
    """The tensors those attributes hold now, by "<module path>.<attr><path in the container>"."""
    return _tensor_leaves({name: getattr(m, attr) for name, (m, attr) in attribute_slots(model).items()})


def _tensor_leaves(values: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {name + pytree.keystr(path): leaf for name, value in values.items()
            for path, leaf in pytree.tree_flatten_with_path(value)[0] if isinstance(leaf, torch.Tensor)}


def _storages(model: Any) -> set[int]:
    """Where the model's parameters and buffers keep their data."""
    if not isinstance(model, torch.nn.Module):
        return set()
    return {p for t in (*model.parameters(), *model.buffers()) if (p := _storage(t)) is not None}


def _storage(t: torch.Tensor) -> int | None:
    try:
        return None if t.device.type == "meta" else t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # no plain storage (a subclass, a sparse tensor)
        return None


class _Copier:
    """Tensors copied once each (by identity), views of the model's parameters and buffers kept as they are."""

    def __init__(self, owned: set[int]):
        self.owned, self.memo = owned, {}

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        if id(t) not in self.memo:
            owned = _storage(t) in self.owned
            self.memo[id(t)] = t if owned else t.detach().clone()
        return self.memo[id(t)]

    def tree(self, value: Any) -> Any:
        return pytree.tree_map(lambda t: self.tensor(t) if isinstance(t, torch.Tensor) else t, value)


class AttributeState:
    """The attributes as a run starts: each one's value saved (tensors cloned), to be put back. Truthy for
    any module: a module with no state yet may make some in its first call."""

    def __init__(self, model: Any):
        self.module = isinstance(model, torch.nn.Module)
        self.slots = attribute_slots(model)
        copier = _Copier(_storages(model))
        self.saved = {name: copier.tree(getattr(m, attr)) for name, (m, attr) in self.slots.items()}
        self.values = _tensor_leaves(self.saved)  # the saved tensors themselves, by leaf key
        self.vacant = {name: type(getattr(m, attr)) for name, (m, attr) in _own(model, _vacant).items()}

    def __bool__(self) -> bool:
        return self.module

    def restore(self, model: Any) -> None:
        """Each saved attribute back to its saved value: a tensor of the same shape and dtype in place where
        its bits changed (its identity kept, for views of it and a compiled graph's guards), anything else
        reassigned; attributes a call filled go back to None or an empty container, and ones it created are
        removed."""
        copier = _Copier(set())
        with torch.no_grad():
            for name, (module, attr) in attribute_slots(model).items():
                if name in self.vacant:
                    kind = self.vacant[name]
                    setattr(module, attr, None if kind is type(None) else kind())
                elif name not in self.saved:
                    delattr(module, attr)
            later = []
            for name, (module, attr) in self.slots.items():  # tensors in place first: containers then share them
                saved, cur = self.saved[name], getattr(module, attr, None)
                if cur is saved:
                    continue  # a view of a parameter or buffer, still in place
                if (isinstance(saved, torch.Tensor) and isinstance(cur, torch.Tensor) and cur.is_leaf
                        and cur.shape == saved.shape and cur.dtype == saved.dtype and cur.device == saved.device
                        and torch._debug_has_internal_overlap(cur) == 0):
                    if id(saved) not in copier.memo:
                        cur.copy_(saved)
                        copier.memo[id(saved)] = cur
                    elif copier.memo[id(saved)] is not cur:
                        setattr(module, attr, copier.memo[id(saved)])
                else:
                    later.append((module, attr, saved))
            for module, attr, saved in later:
                setattr(module, attr, copier.tree(saved))


def cast_attributes(model: Any, cast: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Apply `cast` (a tensor -> tensor) to every attribute tensor, as `Module._apply` does to buffers (each
    tensor once, however many attributes hold it; a leaf that requires grad stays one): the golden's fp64
    copy computes with fp64 state, and state moves to the run's device with the model."""
    memo: dict[int, torch.Tensor] = {}

    def once(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in memo:
            with torch.no_grad():
                c = cast(t)
            memo[id(t)] = c.requires_grad_(True) if t.requires_grad and c is not t and c.is_floating_point() else c
        return memo[id(t)]
    for module, attr in attribute_slots(model).values():
        setattr(module, attr, pytree.tree_map(lambda t: once(t) if isinstance(t, torch.Tensor) else t,
                                              getattr(module, attr)))
