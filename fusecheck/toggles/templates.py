"""`templates.off`: every matmul runs as eager runs it - the aten mm/addmm/bmm/baddbmm kernel, called from the
compiled code - with no autotuned template, no epilogue fusion and no decomposition into pointwise code.

Three things can replace an aten matmul in Inductor: max-autotune's templates (Triton, C++, CUTLASS),
decompositions of small matmuls into mul+sum (CPU: one-row mm/addmm; both: dot-shaped bmm, decided in
the bmm lowering itself), and the epilogues fused into templates. The toggle closes all three: autotune
off with ATen as the only GEMM/conv backend, the matmul decompositions taken out of Inductor's table, and
the matmul ops lowered as plain fallbacks. (`fusion.template` is different: it turns templates ON and
forbids only their fusion - see docs/toggles.md.)
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from .appliers import needs
from .compat import require_attr, require_config, require_module
from .fallbacks import decomposition_table
from .toggle import Toggle

NAME = "templates.off"
MATMULS = ("mm", "addmm", "bmm", "baddbmm")
CONFIG = {"max_autotune": False, "max_autotune_gemm": False, "max_autotune_gemm_backends": "ATEN",
          "max_autotune_conv_backends": "ATEN"}


def _overloads() -> list[torch._ops.OpOverload]:
    out = []
    for name in MATMULS:
        packet = getattr(torch.ops.aten, name)
        out += [getattr(packet, o) for o in packet.overloads()]
    return out


@contextlib.contextmanager
def _aten_matmuls() -> Iterator[None]:
    """Matmuls neither decomposed nor lowered to a template: each is an aten fallback kernel. The lowering
    table is restored on exit (decomposition_table's deliberate_fallbacks puts every registry back)."""
    from torch._inductor import decomposition, lowering

    ops = set(_overloads())
    table = {op: fn for op, fn in decomposition.select_decomp_table().items() if op not in ops}
    with decomposition_table(decomposition, table):
        for op in ops:
            if op in lowering.lowerings:
                lowering.lowerings[op] = lowering.fallback_handler(op, add_to_fallback_set=False)
        yield


def _apply(stack: contextlib.ExitStack) -> None:
    patch = require_config(CONFIG, NAME)
    require_module("torch._inductor.decomposition", NAME)
    for attr in ("select_decomp_table", "decompositions", "fast_random_decomps"):
        require_attr("torch._inductor.decomposition", attr, NAME)
    for attr in ("lowerings", "fallback_handler"):
        require_attr("torch._inductor.lowering", attr, NAME)
    from torch._inductor import config

    stack.enter_context(config.patch(patch))
    stack.enter_context(_aten_matmuls())


TEMPLATES_OFF = Toggle(
    NAME,
    "no matmul/conv templates: every mm/addmm/bmm/baddbmm is eager's aten kernel (not autotuned, not "
    "decomposed, no epilogue fused into it)",
    "max_autotune(_gemm)=False, GEMM/conv backends ATEN only, the matmul decompositions removed from "
    "select_decomp_table(), mm/addmm/bmm/baddbmm lowered as aten fallbacks",
    _apply,
    needs("matmul", "not applicable: no matmul or convolution in the graph"),
)
