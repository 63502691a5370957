"""Running a prepared case once: forward, and with `train` a backward pass with fixed cotangents.

Results are flattened to `{name: tensor}` (outputs by pytree path, gradients by parameter/input name)
so that eager, compiled and golden runs line up key by key.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from fusecheck.case import Case, TargetError
from fusecheck.golden import cast_tree


@dataclass
class RunResult:
    outputs: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor] = field(default_factory=dict)
    cotangents: dict[str, torch.Tensor] | None = None  # what the backward pass used (to reuse in other runs)
    # inputs and module state (parameters, buffers) after the call, keyed "mutated.input[0]", "mutated.state.bn.running_mean"
    after: dict[str, torch.Tensor] = field(default_factory=dict)
    mutated: tuple[str, ...] = ()  # keys of `after` whose values the call changed
    skipped: tuple[str, ...] = ()  # outputs that hold tensors in a form that is not compared (say so)

    def all(self, extra: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
        return {**self.outputs, **self.grads, **{k: self.after[k] for k in extra}}


def module_tensors(model: Any) -> dict[str, torch.Tensor]:
    """Parameters and *all* buffers by name: `state_dict` would leave out non-persistent buffers (KV
    caches, rotary tables), whose in-place updates must be reset and judged like the others."""
    if not isinstance(model, torch.nn.Module):
        return {}
    return {**dict(model.named_parameters(remove_duplicate=False)),
            **dict(model.named_buffers(remove_duplicate=False))}


def state_snapshot(case: Case) -> dict[str, torch.Tensor]:
    """A copy of the module state (parameters and buffers), to reset it before every run."""
    return {k: v.detach().clone() for k, v in module_tensors(case.model).items()}


def restore_state(case: Case, snapshot: dict[str, torch.Tensor]) -> None:
    """Copy the snapshot back in place; a buffer that cannot take it in place (reassigned to a new shape,
    like a KV cache grown with torch.cat, or an expanded view whose elements share memory) is reassigned."""
    if not snapshot:
        return
    buffers = dict(case.model.named_buffers(remove_duplicate=False))
    with torch.no_grad():
        for k, v in module_tensors(case.model).items():
            if k in buffers and (v.shape != snapshot[k].shape or torch._debug_has_internal_overlap(v) != 0):
                owner, _, leaf = k.rpartition(".")
                case.model.get_submodule(owner)._buffers[leaf] = snapshot[k].clone()
            else:
                v.copy_(snapshot[k])


def rng_states(device: str) -> list[torch.Tensor]:
    """The default generators' states (CPU and, for an accelerator, the one of that device), to tell
    whether a run drew random numbers. Generators a model owns are not seen."""
    states = [torch.random.get_rng_state()]
    dev = torch.device(device)
    module = getattr(torch, dev.type, None)
    if dev.type != "cpu" and hasattr(module, "get_rng_state"):
        states.append(module.get_rng_state(dev.index if dev.index is not None else module.current_device()))
    return states


def rng_changed(before: list[torch.Tensor], after: list[torch.Tensor]) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, after))


def _changed(a: torch.Tensor, b: torch.Tensor) -> bool:
    from fusecheck.compare.metrics import bitwise_equal
    return a.shape != b.shape or a.dtype != b.dtype or bitwise_equal(a, b) != a.numel()


def _holds_tensors(obj: Any) -> bool:
    return any(isinstance(v, torch.Tensor) for v in getattr(obj, "__dict__", {}).values())


def flatten_outputs(out: Any, prefix: str = "output", depth: int = 0) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Output tensors by path, and the paths of other objects that hold tensors and are not compared.

    pytree containers (tuple, list, dict, namedtuple, ModelOutput) are walked; dataclasses are walked by
    field, since pytree treats them as leaves and their tensors would otherwise vanish silently.
    """
    flat: dict[str, torch.Tensor] = {}
    skipped: list[str] = []
    for path, leaf in pytree.tree_flatten_with_path(out)[0]:
        name = prefix + pytree.keystr(path)
        if isinstance(leaf, torch.Tensor):
            flat[name] = leaf
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type) and depth < 8:
            inner, more = flatten_outputs({f.name: getattr(leaf, f.name) for f in dataclasses.fields(leaf)},
                                          name, depth + 1)
            flat.update(inner)
            skipped.extend(more)
        elif _holds_tensors(leaf):
            skipped.append(f"{name} ({type(leaf).__name__})")
    return flat, skipped


def make_cotangents(outputs: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Fixed random upstream gradients, one per floating output that needs a gradient."""
    gen = torch.Generator().manual_seed(seed + 1)
    return {k: torch.randn(v.shape, generator=gen, dtype=torch.float32).to(v.dtype).to(v.device)
            for k, v in outputs.items() if v.is_floating_point() and v.requires_grad}


def run_once(fn: Callable[..., Any], case: Case, *, train: bool = False,
             cotangents: dict[str, torch.Tensor] | None = None, seed: int = 0,
             state: dict[str, torch.Tensor] | None = None) -> RunResult:
    """Call `fn(*case.inputs, **case.kwargs)` on fresh copies of the inputs, after resetting the module
    state to `state`, so that a model that mutates its inputs or buffers sees the same values every run;
    what it mutated is returned in `after`/`mutated`. With `train`, backpropagate `cotangents` (made from
    `seed` when None) and collect the gradients of parameters and floating inputs."""
    model = case.model
    params = dict(model.named_parameters()) if isinstance(model, torch.nn.Module) else {}
    restore_state(case, state or {})
    inputs = pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, case.inputs)
    kwargs = pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, case.kwargs)
    leaves = inputs
    if train:
        for p in params.values():
            p.grad = None
        # gradients land on leaves; the model gets non-leaf copies, so it may update its inputs in place
        leaves = pytree.tree_map(lambda x: x.detach().clone().requires_grad_(True)
                                 if isinstance(x, torch.Tensor) and x.is_floating_point() else x, inputs)
        inputs = pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) and x.requires_grad else x,
                                 leaves)
    with torch.set_grad_enabled(train):
        out = fn(*inputs, **kwargs)
    outputs, skipped = flatten_outputs(out)
    if not outputs:
        raise TargetError(f"case {case.name!r}: the model returned no tensors ({type(out).__name__}); nothing to check")
    if train and cotangents is not None:
        lost = [k for k in cotangents if k in outputs and not outputs[k].requires_grad]
        if lost:
            raise RuntimeError(f"{', '.join(lost)} does not require grad where eager's did: the autograd graph "
                               "was dropped, so no gradient can be compared")
    grads: dict[str, torch.Tensor] = {}
    if train:
        cots = cotangents if cotangents is not None else make_cotangents(outputs, seed)
        pairs = [(outputs[k], cast_tree(c, outputs[k].dtype)) for k, c in cots.items() if k in outputs]
        if not pairs:
            raise TargetError(f"case {case.name!r}: --train but no output requires grad")
        torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])
        grads = {f"grad.{n}": p.grad.detach().clone() for n, p in params.items() if p.grad is not None}
        for path, x in pytree.tree_flatten_with_path(leaves)[0]:
            if isinstance(x, torch.Tensor) and x.grad is not None:
                grads[f"grad.input{pytree.keystr(path)}"] = x.grad.detach().clone()
    after, mutated = {}, []
    for prefix, pristine, now_tree in (("input", case.inputs, inputs), ("kwargs", case.kwargs, kwargs)):
        pristine_leaves, _ = pytree.tree_flatten_with_path(pristine)
        for (path, before), now in zip(pristine_leaves, pytree.tree_leaves(now_tree)):
            if isinstance(now, torch.Tensor):
                key = f"mutated.{prefix}{pytree.keystr(path)}"
                after[key] = now.detach()
                if _changed(now.detach(), before.detach()):
                    mutated.append(key)
    if state:
        for k, v in module_tensors(model).items():
            key = f"mutated.state.{k}"
            if _changed(v.detach(), state[k]):
                after[key] = v.detach().clone()
                mutated.append(key)
            else:
                after[key] = state[k]
    return RunResult({k: v.detach().clone() for k, v in outputs.items()}, grads, cots if train else None,
                     after, tuple(mutated), tuple(skipped))
