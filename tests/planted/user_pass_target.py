"""A target file as a user writes it: its own Inductor pass (every `mm` in bf16, a lossy rewrite) installed in
`post_grad_custom_pre_pass` when the file is loaded, and a small Linear model. `fusecheck bisect` loads it as
`fusecheck_target_<hash>`; the culprit is `fusecheck_target_<hash>.LossyMM` and its kernel the `mm`."""
import torch
from torch._inductor import config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

aten = torch.ops.aten
convert = torch.ops.prims.convert_element_type.default


class LossyMM(CustomGraphPass):
    def __call__(self, graph):
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


config.post_grad_custom_pre_pass = LossyMM()


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(64, 64, bias=False)

    def forward(self, x):
        return torch.tanh(self.l1(x)) * 2


def build():
    torch.manual_seed(0)
    return Model(), torch.randn(32, 64)
