"""A harmful user pass in `post_grad_custom_pre_pass` (the slot fusecheck's cache salt wraps): every `mm` of a
graph that contains a sigmoid runs in bf16. Pattern-conditional on purpose: refusing an unrelated
decomposition (e.g. detach's no-op) can change whether it fires, which must not make that decomposition the
culprit."""
import contextlib

import torch
from torch._inductor import config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

aten = torch.ops.aten
convert = torch.ops.prims.convert_element_type.default


class LossyMM(CustomGraphPass):
    def __call__(self, graph):
        if not any(n.target is aten.sigmoid.default for n in graph.nodes):
            return
        for n in [n for n in graph.nodes if n.target is aten.mm.default]:
            with graph.inserting_before(n):
                a = graph.call_function(convert, (n.args[0], torch.bfloat16))
                b = graph.call_function(convert, (n.args[1], torch.bfloat16))
                mm = graph.call_function(aten.mm.default, (a, b))
                out = graph.call_function(convert, (mm, torch.float32))
            n.replace_all_uses_with(out)
            graph.erase_node(n)

    def uuid(self):
        return get_hash_for_files((__file__,))


@contextlib.contextmanager
def planted():
    with config.patch(post_grad_custom_pre_pass=LossyMM()):
        yield
