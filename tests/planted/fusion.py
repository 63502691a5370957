"""A harmful fusion: when a reduction and its consumer are fused into one kernel, codegen hands the
consumer a quantized copy of the reduction result. Unfused, the consumer's kernel loads the exact buffer.
Only loads of a reduction buffer produced in the same fused kernel are hit."""
import contextlib
import importlib

from torch._inductor import ir
from torch._inductor.codegen import common
from torch._inductor.virtualized import V

from tests.planted.quantize import quantize_ops

_FUSED: list[set[str]] = []
_SCHEDULINGS = [("torch._inductor.codegen.cpp", "CppScheduling"), ("torch._inductor.codegen.simd", "SIMDScheduling")]


def _is_reduction_buffer(name):
    try:
        buf = V.graph.get_buffer(name)
    except Exception:
        return False
    return isinstance(getattr(buf, "data", None), ir.Reduction)


def _wrap_codegen_node(orig):
    def codegen_node(self, node):
        names = set()
        if len(node.get_nodes()) > 1:
            for n in node.get_nodes():
                names |= set(n.get_buffer_names()) if hasattr(n, "get_buffer_names") else {n.get_name()}
        _FUSED.append(names)
        try:
            return orig(self, node)
        finally:
            _FUSED.pop()
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
        if _FUSED and name in _FUSED[-1] and _is_reduction_buffer(name):
            return quantize_ops(out)
        return out

    proxy.load = load
    try:
        yield
    finally:
        proxy.load = orig_load
        for cls, orig in saved:
            cls.codegen_node = orig
