"""A harmful custom post-grad pass that only matches *decomposed* softmax: where `div(e, sum(e))` with
`e = exp(...)` appears, the fp32 sum is truncated to bf16's 8 mantissa bits by masking its low 16 bits (a
bit operation, not a cast: Inductor drops an fp32 -> bf16 -> fp32 round trip inside a Triton kernel, which
made the first version of this plant harmless on the H200). It introduces the error; torch's own
`_softmax` decomposition only enables it (with softmax not decomposed the pass finds nothing to rewrite),
so refusing the decomposition also "fixes" the verdict without being the cause (issue 9, item 1)."""
import contextlib

import torch
from torch._inductor import config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

aten = torch.ops.aten


class LossySoftmaxSum(CustomGraphPass):
    def __call__(self, graph):
        for div in [n for n in graph.nodes if n.target is aten.div.Tensor]:
            e, s = div.args[0], div.args[1]
            if not (isinstance(s, torch.fx.Node) and s.target is aten.sum.dim_IntList and s.args[0] is e
                    and isinstance(e, torch.fx.Node) and e.target is aten.exp.default):
                continue
            val = s.meta.get("val")
            if val is not None and val.dtype != torch.float32:
                continue
            with graph.inserting_after(s):
                bits = graph.call_function(aten.view.dtype, (s, torch.int32))
            with graph.inserting_after(bits):
                cut = graph.call_function(aten.bitwise_and.Scalar, (bits, -65536))  # 0xFFFF0000
            with graph.inserting_after(cut):
                back = graph.call_function(aten.view.dtype, (cut, torch.float32))
            s.replace_all_uses_with(back, delete_user_cb=lambda user: user is not bits)

    def uuid(self):
        return get_hash_for_files((__file__,))


@contextlib.contextmanager
def planted():
    # On CUDA/XPU with Triton, Inductor's own post-grad pattern (`online_softmax`) rewrites the decomposed
    # softmax's amax/sub/exp/sum into `prepare_softmax_online` before custom post passes run, and this pass
    # would then find nothing to match: off, so the plant sees the same graph on the H200 as on CPU (where
    # that pattern never applies).
    online = {"online_softmax": False} if hasattr(config, "online_softmax") else {}
    with config.patch(post_grad_custom_post_pass=LossySoftmaxSum(), **online):
        yield
