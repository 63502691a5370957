"""Running a prepared case once: forward, and with `train` a backward pass with fixed cotangents.

Results are flattened to `{name: tensor}` (outputs by pytree path, gradients by parameter/input name)
so that eager, compiled and golden runs line up key by key.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

from fusecheck.case import Case, TargetError
from fusecheck.errors import NoTensorsReturned
from fusecheck.runs.attributes import AttributeState, attribute_tensors
from fusecheck.runs.digest import Digest, digest
from fusecheck.runs.cast import cast_tree


@dataclass
class RunResult:
    outputs: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor] = field(default_factory=dict)
    cotangents: dict[str, torch.Tensor] | None = None  # what the backward pass used (to reuse in other runs)
    # inputs and module state (parameters, buffers) after the call, keyed "mutated.input[0]", "mutated.state.bn.running_mean"
    after: dict[str, torch.Tensor] = field(default_factory=dict)
    mutated: tuple[str, ...] = ()  # keys of `after` whose values the call changed
    skipped: tuple[str, ...] = ()  # outputs that hold tensors in a form that is not compared (say so)
    digests: dict[str, Digest] = field(default_factory=dict)  # a repeat run's results, as bit digests
    # a repeat run's results whose digest differs from the first run's (`differs_from`), kept in full so that
    # every produced result is judged against the golden, whichever call it came from
    differing: dict[str, torch.Tensor] = field(default_factory=dict)
    lost: tuple[str, ...] = ()  # differing results that could not be kept (a gradient taken twice): re-run them

    def all(self, extra: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
        return {**self.outputs, **self.grads, **{k: self.after[k] for k in extra}}


def module_tensors(model: Any) -> dict[str, torch.Tensor]:
    """Parameters and *all* buffers by name: `state_dict` would leave out non-persistent buffers (KV
    caches, rotary tables), whose in-place updates must be reset and judged like the others."""
    if not isinstance(model, torch.nn.Module):
        return {}
    return {**dict(model.named_parameters(remove_duplicate=False)),
            **dict(model.named_buffers(remove_duplicate=False))}


def read_tensors(model: Any) -> dict[str, torch.Tensor]:
    """Every tensor the model reads besides its inputs: parameters, buffers and plain tensor attributes (what
    the streamed golden must see in fp64 wherever it is read)."""
    return {**module_tensors(model), **attribute_tensors(model)}


# Parameters larger than this are not copied to reset them between runs (that would double the model's memory):
# their digest proves they did not change, and a model that changes them in place is refused at that size.
FULL_COPY_PARAM_BYTES = 256 << 20


class StateSnapshot:
    """The module state every run starts from: buffers and plain tensor attributes (runs/attributes.py)
    copied, parameters copied when small. A large parameter is only watched through its version counter (every
    in-place write bumps it): copying it would double the model's memory and reading it to digest it costs a
    pass over the model per run."""

    def __init__(self, case: Case):
        tensors = module_tensors(case.model)
        buffers = set(dict(case.model.named_buffers(remove_duplicate=False))) if tensors else set()
        param_bytes = sum(v.numel() * v.element_size() for k, v in tensors.items() if k not in buffers)
        copy_params = param_bytes <= FULL_COPY_PARAM_BYTES
        self.values = {k: v.detach().clone() for k, v in tensors.items() if k in buffers or copy_params}
        self.versions = {k: (id(v), v._version) for k, v in tensors.items() if k not in self.values}
        self.attributes = AttributeState(case.model)

    def __bool__(self) -> bool:
        return bool(self.values or self.versions or self.attributes)

    def changed(self, key: str, now: torch.Tensor) -> bool:
        if key in self.values:
            return _changed(now, self.values[key])
        return self.versions[key] != (id(now), now._version)

    def refuse_if_written(self, key: str, now: torch.Tensor) -> None:
        """A large parameter written in place cannot be reset to its starting value: refused."""
        if self.changed(key, now):
            raise TargetError(f"the model changes its parameter {key!r} in place; fusecheck resets "
                              f"parameters between runs only below {FULL_COPY_PARAM_BYTES >> 20} MiB")

    def restore(self, case: Case) -> None:
        """Copy the saved state back in place; a buffer that cannot take it in place (reassigned to a new
        shape, like a KV cache grown with torch.cat, or an expanded view whose elements share memory) is
        reassigned. A large parameter written in place cannot be reset: refused."""
        if not self:
            return
        buffers = dict(case.model.named_buffers(remove_duplicate=False))
        with torch.no_grad():
            for k, v in module_tensors(case.model).items():
                if k in self.versions:
                    self.refuse_if_written(k, v)
                    continue
                saved = self.values[k]
                if k in buffers and (v.shape != saved.shape or torch._debug_has_internal_overlap(v) != 0):
                    owner, _, leaf = k.rpartition(".")
                    case.model.get_submodule(owner)._buffers[leaf] = saved.clone()
                else:
                    v.copy_(saved)
        self.attributes.restore(case.model)

    def after(self, model: Any) -> dict[str, tuple[torch.Tensor, bool]]:
        """Each state tensor after a call, with whether the call changed it (a large parameter, unchanged, is
        left out: refused if written)."""
        found = {}
        for k, v in module_tensors(model).items():
            if k in self.versions:
                self.refuse_if_written(k, v)
                continue  # unchanged large parameter: not a result, never read again
            found[k] = (v, True) if self.changed(k, v) else (self.values[k], False)
        for k, v in attribute_tensors(model).items():
            saved = self.attributes.values.get(k)
            moved = saved is None or _changed(v, saved)
            found[k] = (v, True) if moved else (saved, False)
        return found


def state_snapshot(case: Case) -> StateSnapshot:
    return StateSnapshot(case)


def restore_state(case: Case, snapshot: StateSnapshot | None) -> None:
    if snapshot:
        snapshot.restore(case)


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
    """Bookkeeping, not the model's arithmetic: run outside any dispatch mode the run is under (the noise
    band's randomised rounding would take its comparisons for the model's decisions)."""
    from fusecheck.compare.metrics import bitwise_equal
    with _disable_current_modes():
        return a.shape != b.shape or a.dtype != b.dtype or bitwise_equal(a, b) != a.numel()


# Python numbers a model returns (`loss.item()`, a count) are results too: judged as 0-d tensors. A float
# becomes fp32 in every run, the golden's too: `.item()` of a low-precision model is at most fp32-precise, and
# a golden rounded to fp32 still tells a 1e-7 difference (PASS within tolerance) from a 1% one (FAIL)
NUMBER_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float32, complex: torch.complex64}


def flatten_outputs(out: Any, prefix: str = "output", depth: int = 0) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Output tensors by path, and the paths of other objects that are not compared (those holding tensors,
    and leaves that are neither tensors nor numbers: a string, None).

    pytree containers (tuple, list, dict, namedtuple, ModelOutput) are walked; dataclasses are walked by
    field, since pytree treats them as leaves and their tensors would otherwise vanish silently. Python
    numbers become 0-d tensors (NUMBER_DTYPES): ints and bools are then exact, floats judged as fp32.
    """
    flat: dict[str, torch.Tensor] = {}
    skipped: list[str] = []
    for path, leaf in pytree.tree_flatten_with_path(out)[0]:
        name = prefix + pytree.keystr(path)
        if isinstance(leaf, torch.Tensor):
            flat[name] = leaf
        elif type(leaf) in NUMBER_DTYPES:
            flat[name] = torch.tensor(leaf, dtype=NUMBER_DTYPES[type(leaf)])
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type) and depth < 8:
            inner, more = flatten_outputs({f.name: getattr(leaf, f.name) for f in dataclasses.fields(leaf)},
                                          name, depth + 1)
            flat.update(inner)
            skipped.extend(more)
        elif leaf is not None:
            skipped.append(f"{name} ({type(leaf).__name__})")
    return flat, skipped


def make_cotangents(outputs: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Fixed random upstream gradients, one per floating output that needs a gradient."""
    gen = torch.Generator().manual_seed(seed + 1)
    return {k: torch.randn(v.shape, generator=gen, dtype=torch.float32).to(v.dtype).to(v.device)
            for k, v in outputs.items() if v.is_floating_point() and v.requires_grad}


@contextlib.contextmanager
def _taking_grads(params: dict[str, torch.Tensor], take: Callable[[str, torch.Tensor], None]):
    """Hand each parameter's gradient to `take` the moment autograd has accumulated it, and clear `.grad`:
    no run ever holds its gradients twice (on the parameters and in its results)."""
    def hook(name):
        def fn(p):
            if p.grad is not None:
                take(name, p.grad.detach())
                p.grad = None
        return fn
    handles = [p.register_post_accumulate_grad_hook(hook(n)) for n, p in params.items() if p.requires_grad]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def digest_kept(name: str, t: torch.Tensor, differs_from: dict[str, Digest] | None,
                differing: dict[str, torch.Tensor], each: Callable[[str, torch.Tensor], None] | None) -> Digest:
    """A repeat run's result as its digest: `each` sees it first, and it is kept in full in `differing` where
    its digest differs from `differs_from`'s (to be judged)."""
    if each is not None:
        each(name, t)
    d = digest(t)
    if differs_from is not None and differs_from.get(name) != d:
        differing[name] = t
    return d


def run_once(fn: Callable[..., Any], case: Case, *, train: bool = False,
             cotangents: dict[str, torch.Tensor] | None = None, seed: int = 0,
             state: StateSnapshot | None = None, digests_only: bool = False,
             param_grads: bool = True, differs_from: dict[str, Digest] | None = None,
             each: Callable[[str, torch.Tensor], None] | None = None) -> RunResult:
    """Call `fn(*case.inputs, **case.kwargs)` on fresh copies of the inputs, after resetting the module
    state to `state`, so that a model that mutates its inputs or buffers sees the same values every run;
    what it mutated is returned in `after`/`mutated`. With `train`, backpropagate `cotangents` (made from
    `seed` when None) and collect the gradients of parameters (unless `param_grads` is False: a streamed
    golden hands them over itself) and floating inputs. With `digests_only`, every result is kept as a
    digest of its bits (`digests`) instead of a tensor: what a repeat run needs to prove repeatability; with
    `differs_from` (the first run's digests) too, a result whose digest differs is also kept in full
    (`differing`), so that it can be judged: a repeat run never holds the results that repeat the first's;
    `each(name, tensor)` sees every result before its digest replaces it (a run judged as it goes), and a
    gradient accumulated twice is named in `lost` (what `each` saw of it was a part)."""
    model = case.model
    params = dict(model.named_parameters()) if isinstance(model, torch.nn.Module) else {}
    restore_state(case, state)
    inputs = pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, case.inputs)
    kwargs = pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, case.kwargs)
    leaves, kwarg_leaves = inputs, kwargs
    if train:
        for p in params.values():
            p.grad = None
        # gradients land on leaves (keyword inputs' too); the model gets non-leaf copies, so it may update its
        # inputs in place
        def leaf(x):
            return x.detach().clone().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point() \
                else x

        def copy(x):
            return x.clone() if isinstance(x, torch.Tensor) and x.requires_grad else x
        leaves, kwarg_leaves = pytree.tree_map(leaf, inputs), pytree.tree_map(leaf, kwargs)
        inputs, kwargs = pytree.tree_map(copy, leaves), pytree.tree_map(copy, kwarg_leaves)
    with torch.set_grad_enabled(train):
        out = fn(*inputs, **kwargs)
    outputs, skipped = flatten_outputs(out)
    if not outputs:
        raise NoTensorsReturned(f"case {case.name!r}: the model returned no tensors ({type(out).__name__}); "
                                "nothing to check")
    del out
    if train and cotangents is not None:
        lost = [k for k in cotangents if k in outputs and not outputs[k].requires_grad]
        if lost:
            raise RuntimeError(f"{', '.join(lost)} does not require grad where eager's did: the autograd graph "
                               "was dropped, so no gradient can be compared")
    differing: dict[str, torch.Tensor] = {}
    lost: list[str] = []

    def kept(name: str, t: torch.Tensor) -> Any:
        return digest_kept(name, t, differs_from, differing, each) if digests_only else t
    grads: dict[str, Any] = {}
    if train:
        cots = cotangents if cotangents is not None else make_cotangents(outputs, seed)
        with _disable_current_modes():  # bookkeeping: the golden would keep a cast down, randomised rounding flip it
            pairs = [(outputs[k], cast_tree(c, outputs[k].dtype)) for k, c in cots.items() if k in outputs]
        if not pairs:
            raise TargetError(f"case {case.name!r}: --train but no output requires grad")
        taken: dict[str, Any] = {}

        def take(name: str, g: torch.Tensor) -> None:
            if digests_only:  # digest at once, so a repeat run never holds its gradients
                if name in taken:  # accumulated twice: no digest, re-run in full
                    taken[name] = None
                    differing.pop(f"grad.{name}", None)
                    lost.append(f"grad.{name}")
                else:
                    taken[name] = kept(f"grad.{name}", g)
            else:
                taken[name] = taken[name] + g if name in taken else g
        with _taking_grads(params if param_grads else {}, take):
            torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])
        del pairs
        grads = {f"grad.{n}": taken.pop(n) for n in params if n in taken}
        for prefix, tree in (("input", leaves), ("kwargs", kwarg_leaves)):
            for path, x in pytree.tree_flatten_with_path(tree)[0]:
                if isinstance(x, torch.Tensor) and x.grad is not None:
                    key = f"grad.{prefix}{pytree.keystr(path)}"
                    grads[key] = kept(key, x.grad.detach())
    after, mutated = {}, []
    for prefix, pristine, now_tree in (("input", case.inputs, inputs), ("kwargs", case.kwargs, kwargs)):
        pristine_leaves, _ = pytree.tree_flatten_with_path(pristine)
        for (path, before), now in zip(pristine_leaves, pytree.tree_leaves(now_tree)):
            if isinstance(now, torch.Tensor):
                key = f"mutated.{prefix}{pytree.keystr(path)}"
                after[key] = kept(key, now.detach())
                if _changed(now.detach(), before.detach()):
                    mutated.append(key)
    if state:
        for k, (v, moved) in state.after(model).items():
            key = f"mutated.state.{k}"
            after[key] = kept(key, v.detach().clone() if moved else v)
            if moved:
                mutated.append(key)
    outs = {k: kept(k, v.detach().clone()) for k, v in outputs.items()}  # an output may alias a buffer the next run resets
    if digests_only:
        return RunResult({}, {}, cots if train else None, {}, tuple(mutated), tuple(skipped),
                         digests={**outs, **grads, **after}, differing=differing,
                         lost=tuple(sorted(set(lost))))
    return RunResult(outs, grads, cots if train else None, after, tuple(mutated), tuple(skipped))
