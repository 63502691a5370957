"""A pair-only fusion bug inside a longer fused chain: when the buffer an `exp` writes and the `sum` that
reads it land in one fused kernel, codegen hands the sum a quantized copy of the exp values. The other
fusions of the chain (mean + exp, sum + div, ...) are harmless, and so is exp + div without the sum.

Scheduler node names change as nodes merge (`op1 + op2` refused, `op0_op1 + op2_op3` is asked next), so
a bisector that keys fusions by those names re-fuses the pair under another key; keyed by FX origins it
stays refused."""
import contextlib
import importlib

import torch
from torch._inductor.codegen import common
from torch._inductor.virtualized import V

from tests.planted.quantize import quantize_ops

EXP, SUM = torch.ops.aten.exp.default, torch.ops.aten.sum.dim_IntList
_KERNEL: list[tuple[set[str], bool]] = []   # (buffers written by an exp node, kernel holds a sum)
_SCHEDULINGS = [("torch._inductor.codegen.cpp", "CppScheduling"), ("torch._inductor.codegen.simd", "SIMDScheduling")]


def _targets(snode):
    ir_node = getattr(snode, "node", None)
    return {getattr(o, "target", None) for o in (getattr(ir_node, "origins", None) or ())}


def _wrap_codegen_node(orig):
    def codegen_node(self, node):
        nodes = node.get_nodes()
        exp_bufs = {b for n in nodes if EXP in _targets(n) and not n.is_reduction() for b in n.get_buffer_names()}
        has_sum = any(SUM in _targets(n) and n.is_reduction() for n in nodes)
        _KERNEL.append((exp_bufs, has_sum and len(nodes) > 1))
        try:
            return orig(self, node)
        finally:
            _KERNEL.pop()
    return codegen_node


@contextlib.contextmanager
def planted():
    proxy = common.CSEProxy
    orig_load = proxy.load
    saved = []
    for mod, cls_name in _SCHEDULINGS:
        try:
            cls = getattr(importlib.import_module(mod), cls_name)
        except (ImportError, AttributeError):
            continue
        saved.append((cls, cls.__dict__["codegen_node"]))
        cls.codegen_node = _wrap_codegen_node(cls.__dict__["codegen_node"])

    def load(self, name, index):
        out = orig_load(self, name, index)
        if _KERNEL and _KERNEL[-1][1] and name in _KERNEL[-1][0] and V.graph is not None:
            q = quantize_ops(out)
            return getattr(q, "value", q)   # a CSE variable, as the reduction that loads it expects
        return out

    proxy.load = load
    try:
        yield
    finally:
        proxy.load = orig_load
        for cls, orig in saved:
            cls.codegen_node = orig
