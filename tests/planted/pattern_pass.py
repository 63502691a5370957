"""A harmful custom post-grad pattern pass: rewrites `sum(x, dims)` to sum in bf16 (then back to fp32).

Installed the way users install theirs, via `config.post_grad_custom_post_pass`. The bf16 sum's output is
a reduction result stored as bf16, so its rounding survives codegen.
"""
import contextlib

import torch
from torch._inductor import config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files
from torch._inductor.pattern_matcher import CallFunction, KeywordArg, Arg, PatternMatcherPass, register_graph_pattern

aten = torch.ops.aten
PASS = PatternMatcherPass(pass_name="planted_lossy_sum")


@register_graph_pattern(CallFunction(aten.sum.dim_IntList, Arg(), Arg(), KeywordArg("keepdim")), pass_dict=PASS)
def lossy_sum_rewrite(match, x, dims, keepdim):
    """The planted bug: the sum is computed and stored in bf16."""
    def repl(x, dims):
        return aten.sum.dim_IntList(x.to(torch.bfloat16), dims, keepdim).to(x.dtype)
    match.replace_by_example(repl, [x, dims])


class LossySumPass(CustomGraphPass):
    def __call__(self, graph):
        PASS.apply(graph)

    def uuid(self):
        return get_hash_for_files((__file__,))


@contextlib.contextmanager
def planted():
    with config.patch(post_grad_custom_post_pass=LossySumPass()):
        yield
