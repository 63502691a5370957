"""torch's own fused ops, validated with the same specs as our reference kernels:
`torch.ops.symm_mem.fused_all_gather_matmul` and `torch.ops.symm_mem.fused_matmul_reduce_scatter`.

They are real fused kernels (symmetric memory, CUDA, NCCL) that nobody here wrote. Layer 1 runs the op itself
with B = identity, so the op's own gather/reduce path moves the position tags (exact: x @ I in fp32 without
TF32 adds only zeros). Layer 2 cannot reach inside the op, so it checks the per-chunk matmul the op runs.
`--spec-arg impl=fallback` uses torch's Python fallbacks instead, which run on gloo (how this spec is tested
on CPU); `impl=symm_mem` (default) needs CUDA GPUs.
"""
from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

import torch


def _sibling(name: str, cls: str):
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"fusecheck_kernels_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, cls)


AllGatherGemm = _sibling("ag_gemm", "AllGatherGemm")
GemmReduceScatter = _sibling("gemm_rs", "GemmReduceScatter")
IMPLS = ("symm_mem", "fallback")


@contextlib.contextmanager
def _exact_matmul():
    """No TF32 while the identity matmul moves tags (TF32 would round fp32 tags)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


class _SymmMem:
    op_name = ""
    fallback_name = ""
    # the fallbacks' functional collectives import dynamo on first use (~2 s per rank): import it before forking
    preload_modules = ("torch._dynamo",)

    def __init__(self, impl: str = "symm_mem"):
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
        self.impl = impl
        self.backends = ("nccl",) if impl == "symm_mem" else ("gloo", "nccl")

    def requirement(self) -> str:
        return (f"torch.ops.symm_mem.{self.op_name} needs CUDA GPUs (one per rank) with NCCL and symmetric memory; "
                f"--spec-arg impl=fallback runs torch's Python fallback on gloo instead")

    def _op(self, group):
        import torch.distributed._symmetric_memory as symm
        if self.impl == "fallback":
            return getattr(symm, self.fallback_name)
        symm.enable_symm_mem_for_group(group.group_name)
        return getattr(torch.ops.symm_mem, self.op_name)


class SymmMemAllGatherMatmul(_SymmMem, AllGatherGemm):
    tiling = {"chunks": 1}   # the op pipelines one rank's shard at a time; no user-visible tile parameter
    op_name, fallback_name = "fused_all_gather_matmul", "_fused_all_gather_matmul_fallback"

    def fused(self, inputs, group):
        _, outs = self._op(group)(inputs["a"].contiguous(), [inputs["b"]], gather_dim=0, group_name=group.group_name)
        return outs[0]

    def comm_only(self, x, group):
        eye = torch.eye(x.shape[1], dtype=x.dtype, device=x.device)
        with _exact_matmul():
            _, outs = self._op(group)(x.contiguous(), [eye], gather_dim=0, group_name=group.group_name)
        return outs[0]


class SymmMemMatmulReduceScatter(_SymmMem, GemmReduceScatter):
    tiling = {"chunks": 1}
    op_name, fallback_name = "fused_matmul_reduce_scatter", "_fused_matmul_reduce_scatter_fallback"

    def fused(self, inputs, group):
        return self._op(group)(inputs["a"].contiguous(), inputs["b"], "sum", 0, group.group_name)

    def comm_only(self, x, group):
        eye = torch.eye(x.shape[1], dtype=x.dtype, device=x.device)
        with _exact_matmul():
            return self._op(group)(x.contiguous(), eye, "sum", 0, group.group_name)
