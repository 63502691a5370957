"""A user's dynamo backend (what `--backend FILE.py:NAME` loads) that rounds one op: every `exp` result is
passed through bf16 before its consumers see it. Everything else runs as captured."""
import torch


def _is_exp(n):
    return (n.op == "call_function" and n.target in (torch.exp, torch.ops.aten.exp.default)) or \
        (n.op == "call_method" and n.target == "exp")


def lossy_exp_backend(gm, example_inputs):
    for n in [n for n in gm.graph.nodes if _is_exp(n)]:
        with gm.graph.inserting_after(n):
            low = gm.graph.call_method("to", (n, torch.bfloat16))
        with gm.graph.inserting_after(low):
            back = gm.graph.call_method("to", (low, torch.float32))
        n.replace_all_uses_with(back, delete_user_cb=lambda u: u is not low)
    gm.recompile()
    return gm.forward


def exact_backend(gm, example_inputs):
    """A backend that changes nothing: bisect must find nothing to blame."""
    return gm.forward
