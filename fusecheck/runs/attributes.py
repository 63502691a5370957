"""Module state held in plain attributes: tensors a module keeps outside its parameters and buffers.

Why: `self.k_cache = k`, an EMA kept in `self.ema = torch.zeros(...)` and updated in place, `self.cache =
[k, v]` are module state exactly as a buffer is, but `named_buffers` does not list them. Unseen, a run
started from the state the previous run left (eager looked nondeterministic, and a wrong compiled cache was
absorbed as eager's own drift: a +0.3 shift passed) and the state a run leaves was never judged. Here they
are found on every submodule (a tensor, or a list/tuple/dict holding tensors), saved, put back before each
run (an attribute the first call created is removed again) and read after it as results
("mutated.state.<module>.<attr>").
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

Slot = tuple[torch.nn.Module, str]  # (the module, the attribute's name)


def _holds_tensors(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return not isinstance(value, torch.nn.Parameter)
    if isinstance(value, (list, tuple, dict)):
        leaves = pytree.tree_leaves(value)
        return (any(isinstance(v, torch.Tensor) for v in leaves)
                and not any(isinstance(v, (torch.nn.Module, torch.nn.Parameter)) for v in leaves))
    return False


def attribute_slots(model: Any) -> dict[str, Slot]:
    """Every plain attribute holding tensors, by "<module path>.<attr>" (a shared module once)."""
    if not isinstance(model, torch.nn.Module):
        return {}
    found = {}
    for prefix, module in model.named_modules():
        for attr, value in vars(module).items():
            if not attr.startswith("__") and _holds_tensors(value):
                found[f"{prefix}.{attr}" if prefix else attr] = (module, attr)
    return found


def attribute_tensors(model: Any) -> dict[str, torch.Tensor]:
    """The tensors those attributes hold now, by "<module path>.<attr><path in the container>"."""
    return _tensor_leaves({name: getattr(m, attr) for name, (m, attr) in attribute_slots(model).items()})


def _tensor_leaves(values: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {name + pytree.keystr(path): leaf for name, value in values.items()
            for path, leaf in pytree.tree_flatten_with_path(value)[0] if isinstance(leaf, torch.Tensor)}


def _cloned(value: Any) -> Any:
    return pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, value)


class AttributeState:
    """The attributes as a run starts: each one's value saved (tensors cloned), to be put back."""

    def __init__(self, model: Any):
        self.slots = attribute_slots(model)
        self.saved = {name: _cloned(getattr(m, attr)) for name, (m, attr) in self.slots.items()}
        self.values = _tensor_leaves(self.saved)  # the saved tensors themselves, by leaf key

    def __bool__(self) -> bool:
        return bool(self.saved)

    def restore(self, model: Any) -> None:
        """Each saved attribute back to its saved value: a tensor of the same shape and dtype in place (its
        identity kept, for views of it and a compiled graph's guards), anything else reassigned; attributes
        that appeared since (made by a call) are removed."""
        now = attribute_slots(model)
        with torch.no_grad():
            for name, (module, attr) in now.items():
                if name not in self.saved:
                    delattr(module, attr)
            for name, (module, attr) in self.slots.items():
                saved, cur = self.saved[name], getattr(module, attr, None)
                if (isinstance(saved, torch.Tensor) and isinstance(cur, torch.Tensor)
                        and cur.shape == saved.shape and cur.dtype == saved.dtype and cur.device == saved.device
                        and torch._debug_has_internal_overlap(cur) == 0):
                    cur.copy_(saved)
                else:
                    setattr(module, attr, _cloned(saved))


def cast_attributes(model: Any, cast) -> None:
    """Apply `cast` (a tensor -> tensor) to every attribute tensor, as `Module._apply` does to buffers: the
    golden's fp64 copy computes with fp64 state, and state moves to the run's device with the model."""
    for module, attr in attribute_slots(model).values():
        setattr(module, attr, pytree.tree_map(lambda t: cast(t) if isinstance(t, torch.Tensor) else t,
                                              getattr(module, attr)))
