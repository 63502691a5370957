"""The graphs a bisection splits are captured with static shapes: a frame called at two lengths (an encoder's
and a decoder's sequence, Switch Transformers' attention) was captured the second time with symbolic sizes,
and the eager replay of that graph raised (`fusecheck bisect --repro` ended in a traceback)."""
import torch

from fusecheck.bisect.graph_split import Replay, capture_graph


def _scaled_rows(x):
    y = x * 2
    torch._dynamo.graph_break()
    return y.reshape(x.shape[0], x.shape[1] * x.shape[2]).sum(-1)


class TwoLengths(torch.nn.Module):
    def forward(self, a, b):
        return _scaled_rows(a).sum() + _scaled_rows(b).sum()


def test_a_frame_called_at_two_lengths_is_captured_with_concrete_sizes_and_replays():
    graphs = capture_graph(TwoLengths(), (torch.randn(2, 3, 4), torch.randn(2, 5, 4)))
    assert len(graphs) >= 3
    for gm, inputs in graphs:
        assert all(isinstance(x, (torch.Tensor, int, float)) and not isinstance(x, torch.SymInt) for x in inputs)
        with torch.no_grad():
            Replay(gm).run(*inputs)  # raised "SymIntArrayRef expected to contain only concrete integers"
