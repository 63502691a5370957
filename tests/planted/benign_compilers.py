"""Correct compilers by construction, each with a different rounding from eager's (what a fusion compiler
does): the checker must pass every one of them, on every seed.

* `reassociated`: every fp32 reduction (GEMM contraction index, sum/mean dims) in another order, forward and
  backward -- a different tiling or split-K; nothing else changes.
* `fp32_intermediates`: every graph (forward and backward) computed in fp32 from low-precision inputs, the
  results rounded once to their dtype -- Inductor's upcast of fused elementwise chains.
Each call of a graph makes the same choices (fixed seeds), so a compiled run repeats itself.
"""
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch.utils import _pytree as pytree

from fusecheck.compare.noise_band import RandomRounding

LOW = (torch.float16, torch.bfloat16)


def _reassociating(gm, example_inputs, seed=[1000]):
    seed[0] += 1
    mine = seed[0]

    def run(*args):
        with RandomRounding(mine, flip=0.0, reassociate=True):
            return gm(*args)
    return make_boxed_func(run)


def _in_fp32(gm, example_inputs):
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    wanted = [a.meta.get("val").dtype if isinstance(a, torch.fx.Node) and a.meta.get("val") is not None else None
              for a in pytree.tree_leaves(out_node.args[0])]

    def run(*args):
        up = [a.float() if isinstance(a, torch.Tensor) and a.dtype in LOW else a for a in args]
        leaves, spec = pytree.tree_flatten(gm(*up))
        leaves = [o.to(w) if isinstance(o, torch.Tensor) and w is not None and o.dtype != w else o
                  for o, w in zip(leaves, wanted)]
        return pytree.tree_unflatten(leaves, spec)
    return make_boxed_func(run)


reassociated = aot_autograd(fw_compiler=_reassociating, bw_compiler=_reassociating)
fp32_intermediates = aot_autograd(fw_compiler=_in_fp32, bw_compiler=_in_fp32)


def _reciprocal(gm, example_inputs):
    """a / b computed as a * (1 / b): correct to within an ulp, but not exact where eager is (x / x = 1)."""
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target is torch.ops.aten.div.Tensor and \
                all(isinstance(a, torch.fx.Node) for a in n.args[:2]):
            with gm.graph.inserting_before(n):
                inv = gm.graph.call_function(torch.ops.aten.reciprocal.default, (n.args[1],))
                mul = gm.graph.call_function(torch.ops.aten.mul.Tensor, (n.args[0], inv))
            mul.meta = dict(n.meta)
            n.replace_all_uses_with(mul)
            gm.graph.erase_node(n)
    gm.recompile()
    return make_boxed_func(gm.forward)


reciprocal_division = aot_autograd(fw_compiler=_reciprocal, bw_compiler=_reciprocal)
