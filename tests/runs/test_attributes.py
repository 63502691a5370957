"""Module state in plain tensor attributes: found, saved, put back before each run, cast with the model."""
import torch

from fusecheck.case import Case
from fusecheck.runs.attributes import AttributeState, attribute_tensors
from fusecheck.runs.cast import golden_case
from fusecheck.runs.execute import run_once, state_snapshot


class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.ema = torch.zeros(3)                  # updated in place
        self.pair = [torch.ones(2), torch.ones(2)]  # reassigned as a container
        self.lin.note = torch.full((3,), 2.0)       # on a submodule
        self.peers = [self.lin]                     # a module in a list: not state
        self.label = "text"

    def forward(self, x):
        self.ema.mul_(0.5).add_(x.mean(0))
        self.pair = [self.pair[0] + 1, self.pair[1] * 3]
        self.made = x.sum(0)                       # created by the call
        return self.lin(x) + self.ema


def test_plain_tensor_attributes_are_found_by_path_and_modules_and_parameters_are_not():
    found = attribute_tensors(Holder())
    assert set(found) == {"ema", "pair[0]", "pair[1]", "lin.note"}


def test_restore_puts_every_attribute_back_and_removes_the_ones_a_call_made():
    m = Holder()
    ema, note = m.ema, m.lin.note
    state = AttributeState(m)
    m(torch.randn(4, 3))
    m.lin.note = torch.zeros(5)  # reassigned to another shape
    assert hasattr(m, "made") and float(m.ema.abs().sum()) > 0
    state.restore(m)
    assert not hasattr(m, "made")
    assert m.ema is ema and torch.equal(ema, torch.zeros(3))  # in place: its identity kept
    assert [t.tolist() for t in m.pair] == [[1.0, 1.0], [1.0, 1.0]]
    assert torch.equal(m.lin.note, torch.full((3,), 2.0)) and m.lin.note is not note


def test_every_run_starts_from_the_saved_attributes_and_reports_what_it_changed():
    case = Case(Holder(), (torch.randn(4, 3),), "holder")
    state = state_snapshot(case)
    first = run_once(case.model, case, state=state)
    again = run_once(case.model, case, state=state)
    assert torch.equal(first.outputs["output"], again.outputs["output"])
    assert set(first.mutated) == {"mutated.state.ema", "mutated.state.pair[0]", "mutated.state.pair[1]",
                                  "mutated.state.made"}
    assert "mutated.state.lin.note" in first.after and "mutated.state.lin.note" not in first.mutated


def test_the_golden_copy_holds_its_attributes_in_the_golden_dtype():
    case = Case(Holder(), (torch.randn(4, 3),), "holder")
    g = golden_case(case, torch.float64)
    assert all(t.dtype == torch.float64 for t in attribute_tensors(g.model).values())
    assert all(t.dtype == torch.float32 for t in attribute_tensors(case.model).values())  # a copy, not the model


def test_a_view_of_a_parameter_is_not_copied_nor_written_and_shared_tensors_stay_shared():
    class Aliases(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(4, 3)
            self.out_w = self.emb.weight.detach()  # a view of a parameter
            shared = torch.zeros(3)
            self.first, self.second = shared, [shared]

    m = Aliases()
    version = m.emb.weight._version
    state = AttributeState(m)
    assert state.saved["out_w"] is m.out_w  # kept, not cloned
    m.first.add_(1)
    state.restore(m)
    assert m.emb.weight._version == version and m.second[0] is m.first and float(m.first.sum()) == 0
    g = golden_case(Case(m, (torch.zeros(1, dtype=torch.long),), "aliases"), torch.float64).model
    assert g.second[0] is g.first and g.first.dtype == torch.float64


def test_a_leaf_attribute_that_requires_grad_stays_a_leaf_when_cast():
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.ones(3, requires_grad=True)

    g = golden_case(Case(Scale(), (torch.zeros(3),), "scale"), torch.float64).model
    assert g.scale.is_leaf and g.scale.requires_grad and g.scale.dtype == torch.float64
