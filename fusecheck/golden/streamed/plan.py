"""Which submodules are blocks, and how the rest of the model is split into pieces for streaming.

Blocks are the children of the model's largest layer stack: an `nn.ModuleList` (every transformers model),
or an `nn.Sequential` / `nn.ModuleDict` whose children all share one class (timm's ViT `blocks`, a ResNet
stage, a user's stack called by key) -- or the modules a user names with a glob (`--blocks 'model.layers.*'`).
Everything outside the blocks is split into *units*: the largest subtrees that contain no block (embeddings,
final norm, lm_head, rotary tables), each upcast on its own. Modules *above* the blocks that own tensors
directly (a ViT's cls_token on the root) cannot be entered separately, so their own tensors are upcast for
the whole run.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

import torch

from fusecheck.case import TargetError


@dataclass
class BlockPlan:
    blocks: list[tuple[str, torch.nn.Module]]   # in model order
    units: list[tuple[str, torch.nn.Module]]    # block-free subtrees outside the blocks
    resident: list[tuple[str, torch.nn.Module]]  # ancestors of blocks that own tensors directly
    source: str                                  # how the blocks were found, for the report
    # Units no larger than a block are upcast for the whole run instead: models read such small pieces'
    # weights from outside them (ViT casts its input to `embeddings.projection.weight.dtype`), and keeping
    # them in fp64 costs at most a block each. Larger ones (an LLM's embedding and head) are streamed.
    resident_units: list[tuple[str, torch.nn.Module]] = field(default_factory=list)

    @property
    def pieces(self) -> list[tuple[str, torch.nn.Module]]:
        return self.blocks + self.units

    def describe(self) -> str:
        return (f"{len(self.blocks)} blocks ({self.source}), {len(self.units)} other pieces streamed, "
                f"{len(self.resident_units)} small ones upcast for the whole run")


def _numel(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _owns_tensors(module: torch.nn.Module) -> bool:
    return any(t is not None for t in (*module._parameters.values(), *module._buffers.values()))


NO_STACK = ("no layer stack (an nn.ModuleList of two or more children, or an nn.Sequential / nn.ModuleDict of "
            "two or more of one class)")


def _is_stack(module: torch.nn.Module) -> bool:
    """Two or more children of one container, called in turn: any ModuleList; a Sequential or ModuleDict only
    when its children share one class (a Sequential of Linear, GELU, Linear is one block's MLP, not a stack)."""
    if isinstance(module, torch.nn.ModuleList):
        return len(module) >= 2
    if not isinstance(module, (torch.nn.Sequential, torch.nn.ModuleDict)) or len(module) < 2:
        return False
    return len({type(c) for _, c in _entries(module)}) == 1


def _entries(stack: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """(key, child) in order; a child the stack holds twice (one block called twice) is one block, under its
    first key: a block is a module, upcast on entry however often it is entered."""
    items = stack.items() if isinstance(stack, torch.nn.ModuleDict) else ((str(i), m) for i, m in enumerate(stack))
    first: dict[int, tuple[str, torch.nn.Module]] = {}
    for key, m in items:
        first.setdefault(id(m), (key, m))
    return list(first.values())


def _largest_stack(model: torch.nn.Module) -> tuple[str, torch.nn.Module] | None:
    stacks = [(n, m) for n, m in model.named_modules() if _is_stack(m)]
    return max(stacks, key=lambda nm: _numel(nm[1]), default=None)


def _matching(model: torch.nn.Module, pattern: str) -> list[tuple[str, torch.nn.Module]]:
    """Modules whose qualified name matches `pattern`, outermost only (a match inside a match is not a block)."""
    found: list[tuple[str, torch.nn.Module]] = []
    for name, module in model.named_modules():
        if name and fnmatch.fnmatchcase(name, pattern) and not any(name.startswith(f + ".") for f, _ in found):
            found.append((name, module))
    return found


def find_blocks(model: torch.nn.Module, pattern: str | None = None) -> tuple[list[tuple[str, torch.nn.Module]], str]:
    if pattern:
        blocks = _matching(model, pattern)
        if not blocks:
            biggest = sorted(((n, _numel(m)) for n, m in model.named_modules() if n), key=lambda x: -x[1])[:5]
            raise TargetError(f"--blocks {pattern!r} matches no submodule; the largest are: "
                              + ", ".join(n for n, _ in biggest))
        return blocks, f"--blocks {pattern!r}"
    found = _largest_stack(model)
    if found is None:
        return [], NO_STACK
    name, stack = found
    return ([(f"{name}.{key}" if name else key, m) for key, m in _entries(stack)],
            f"children of {name or 'the root'!r}")


def make_plan(model: torch.nn.Module, pattern: str | None = None) -> BlockPlan | None:
    """The streaming plan, or None when the model has no blocks (then the whole-model golden is used)."""
    blocks, source = find_blocks(model, pattern)
    if not blocks:
        return None
    block_ids = {id(m) for _, m in blocks}
    holds_block: dict[int, bool] = {}

    def contains_block(module: torch.nn.Module) -> bool:
        key = id(module)
        if key not in holds_block:
            holds_block[key] = key in block_ids or any(contains_block(c) for c in module.children())
        return holds_block[key]

    units: list[tuple[str, torch.nn.Module]] = []
    resident: list[tuple[str, torch.nn.Module]] = []

    def walk(prefix: str, module: torch.nn.Module) -> None:
        if id(module) in block_ids:
            return
        if not contains_block(module):
            if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
                units.append((prefix, module))
            return
        if _owns_tensors(module):
            resident.append((prefix, module))
        for child_name, child in module.named_children():
            walk(f"{prefix}.{child_name}" if prefix else child_name, child)

    walk("", model)
    largest_block = max(_bytes(m) for _, m in blocks)
    small = [(n, m) for n, m in units if _bytes(m) <= largest_block]
    return BlockPlan(blocks, [u for u in units if u not in small], resident, source, small)


def _bytes(module: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))
