"""A kept cast (`h.float()` stays fp64 in the golden) must not change what the model computes: the bits, the
finfo constants and the range eager's dtype gives the value stay eager's, a buffer of eager's dtype receives it
in its own dtype, and where the model's code still cannot take the kept value (it asserts the dtype) the golden
rounds at the casts as written and says so. Each model here is checked twice: a correct compile passes, a
1% error in the compiled graph fails, and the golden matches the model computed by hand in fp64."""
import pytest
import torch
from torch import nn

from fusecheck.case import Case
from fusecheck.check import run_check
from fusecheck.golden.fallback import GoldenFallback, eager_precision

BAD = "tests/planted/backends.py:scale_float_outputs"


class SegmentSum(nn.Module):
    """MoE combine: an fp32 accumulator from a factory, written with a cast value (index_add_ needs one dtype)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("seg", torch.tensor([0, 1, 2, 0, 1, 2]))

    def forward(self, x):
        acc = torch.zeros(3, 8, dtype=torch.float32, device=x.device)
        acc.index_add_(0, self.seg, self.lin(x).float())
        out = torch.zeros(6, 8, dtype=torch.float32, device=x.device)
        out[self.seg * 2 % 6] = self.lin(x).to(torch.float32)  # index_put_
        # read back in the model's dtype: in the golden an fp32 tensor cast up, whose gradient autograd casts
        # down again (a cast the golden must not keep)
        return acc, out + acc[self.seg % 3].to(x.dtype)


class MantissaTruncation(nn.Module):
    """Bits of an fp32 value: `view(torch.int32)` after an explicit `.float()` (a fake-quant idiom)."""

    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        h = self.lin1(x).float()
        return self.lin2((h.view(torch.int32) & -65536).view(torch.float32))


class FinfoGuards(nn.Module):
    """Constants read from the cast value's dtype: an overflow guard and a log clamp."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 32)

    def forward(self, x):
        h = self.lin(x).float()
        e = torch.exp(h * 60)  # overflows fp32 on some elements, not fp64
        guarded = torch.nan_to_num(e) / torch.finfo(e.dtype).max
        p = (h * 8).softmax(-1)
        return guarded, torch.log(p.clamp_min(torch.finfo(p.dtype).eps))


class AssertsItsDtype(nn.Module):
    """Code no dispatch mode can see: it reads the dtype in Python."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        h = self.lin(x).float()
        assert h.dtype in (torch.float32, torch.bfloat16), h.dtype
        return h * 2


class MaskFromTheScoresDtype(nn.Module):
    """transformers' CANINE attention: a mask made by the model in fp32 (a factory), scaled by the finfo minimum
    of the *scores'* dtype. In the golden the scores are fp64, and fp64's minimum times the fp32 mask is -inf
    where masked and 0 * -inf = NaN where not: no cast is kept here, the constant alone changes meaning."""

    def __init__(self):
        super().__init__()
        self.q, self.k = nn.Linear(16, 16), nn.Linear(16, 16, bias=False)  # a key bias has a zero gradient

    def forward(self, x):
        keep = torch.ones(x.shape[0], x.shape[1], device=x.device)
        keep[:, -2:] = 0  # the last two positions are padding
        scores = self.q(x) @ self.k(x).transpose(-1, -2) / 4
        mask = (1.0 - keep[:, None, :].float()) * torch.finfo(scores.dtype).min
        return (scores + mask.to(scores.dtype)).softmax(-1) @ x


def _case(model: nn.Module, *inputs) -> Case:
    return Case(model, inputs, type(model).__name__)


def _cases():
    torch.manual_seed(0)
    return [
        _case(SegmentSum(), torch.randn(6, 8)),
        _case(MantissaTruncation(), torch.randn(8, 16)),
        _case(FinfoGuards(), torch.randn(8, 16)),
        _case(AssertsItsDtype(), torch.randn(8, 16)),
        _case(MaskFromTheScoresDtype(), torch.randn(2, 6, 16)),
    ]


@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
@pytest.mark.parametrize("index", range(5), ids=["segment_sum", "mantissa", "finfo", "asserts_dtype", "mask_finfo"])
def test_a_correct_compile_passes_and_a_one_percent_error_fails(index, train):
    ok = run_check(_cases()[index], backend="aot_eager", train=train)
    bad = run_check(_cases()[index], backend=BAD, train=train)
    assert ok.status == "PASS", [(r.name, r.verdict.message) for r in ok.rows]
    if index != 3:  # the kept casts held (only the asserting model makes the golden stand them down)
        assert not any("round as written" in n for n in ok.notes), ok.notes
    assert bad.status == "FAIL" and any(r.verdict.code == "worse_than_eager" for r in bad.rows), \
        [(r.name, r.verdict.message) for r in bad.rows]
    # eager's error is eager's rounding, not another function: far below what the 1% plant adds
    planted = {r.name: r.vs_golden.values["rmse"] for r in bad.rows if r.vs_golden is not None}
    for row in ok.rows:
        if row.reference_vs_golden is not None and planted.get(row.name, 0) > 0:
            assert row.reference_vs_golden.values["rmse"] * 100 < planted[row.name], row.name


def _golden(model: nn.Module, *inputs):
    model = model.double()
    with torch.no_grad(), GoldenFallback(torch.float64, run=torch.float32) as mode:
        out = model(*(x.double() for x in inputs))
    return out, mode


def test_bits_are_read_at_eagers_dtype():
    torch.manual_seed(0)
    m, x = MantissaTruncation(), torch.randn(8, 16)
    out, mode = _golden(m, x)
    h = m.lin1(x.double()).float()  # eager's dtype at the view: the fp64 value rounded once
    want = m.lin2((h.view(torch.int32) & -65536).view(torch.float32).double())
    assert out.shape == want.shape and torch.allclose(out, want, rtol=0, atol=1e-12)
    assert any("bits read" in n for n in mode.notes())


def test_finfo_constants_and_overflow_are_eagers():
    torch.manual_seed(0)
    m, x = FinfoGuards(), torch.randn(8, 16)
    (guarded, logp), mode = _golden(m, x)
    h = m.lin(x.double())
    e = torch.exp(h * 60)
    e32max = torch.finfo(torch.float32).max
    want = torch.where(e > e32max, torch.full_like(e, e32max), e) / e32max
    assert torch.allclose(guarded, want, rtol=1e-12, atol=0) and (e > e32max).any()
    assert logp.min() >= torch.log(torch.tensor(torch.finfo(torch.float32).eps, dtype=torch.float64)) - 1e-12
    assert any("finfo constants" in n for n in mode.notes())


def test_a_written_buffer_receives_the_value_in_its_own_dtype():
    torch.manual_seed(0)
    m, x = SegmentSum(), torch.randn(6, 8)
    (acc, _), mode = _golden(m, x)
    assert acc.dtype == torch.float32 and any("written into a float32 buffer" in n for n in mode.notes())


def test_code_that_refuses_the_kept_value_gets_the_casts_as_written_and_a_note():
    torch.manual_seed(0)
    report = run_check(_case(AssertsItsDtype(), torch.randn(8, 16)), backend="aot_eager")
    assert report.passed
    assert any("round as written" in n and "AssertionError" in n for n in report.notes), report.notes


def test_eager_precision_is_the_dtype_that_holds_most_parameters():
    mixed = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16))
    mixed[0].to(torch.bfloat16)  # bf16 weights, fp32 norm: a bf16 model
    assert eager_precision(Case(mixed, (torch.randn(2, 16),), "m"), None) is torch.bfloat16
    scale = nn.Linear(16, 16)
    scale.q = nn.Parameter(torch.ones(4, dtype=torch.bfloat16))  # an fp32 model holding one bf16 scale
    assert eager_precision(Case(scale, (torch.randn(2, 16),), "m"), None) is torch.float32


def test_an_operand_the_model_cast_down_is_upcast_exactly_beside_golden_ones():
    """A bf16 model with an fp32 residual stream that casts to a literal dtype: in an fp32 model holding
    the same bf16 layer, the cast stays (the model's rounding) and the fp64 layer receives it upcast."""
    torch.manual_seed(0)
    lin = nn.Linear(16, 16).double()
    x = torch.randn(4, 16, dtype=torch.float64)
    with GoldenFallback(torch.float64, run=torch.float32) as mode:
        out = lin(x.to(torch.bfloat16))
    assert out.dtype == torch.float64
    assert torch.allclose(out, lin(x.to(torch.bfloat16).double()), rtol=0, atol=1e-13)
    assert any("upcast (exactly)" in n for n in mode.notes()) and not mode.fell_back


class CheckpointedNorms(nn.Module):
    """Blocks with an fp32 RMS norm under activation checkpointing: the recompute runs the model's casts
    inside a backward (a reentrant checkpoint in a Python Function's backward, a non-reentrant one in a
    built-in node's unpacking of a saved tensor, with grad mode on); they are the model's and stay kept, or
    the non-reentrant checkpoint finds recomputed values of another dtype."""

    def __init__(self, reentrant: bool):
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))
        self.reentrant = reentrant

    def block(self, fc, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return x + torch.tanh(fc(h.to(x.dtype)))

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        for fc in self.fcs:
            x = checkpoint(self.block, fc, x, use_reentrant=self.reentrant)
        return x


@pytest.mark.parametrize("golden", ["whole", "streamed"])
@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_casts_in_a_checkpoints_recompute_stay_kept(reentrant, golden):
    def check(backend):
        torch.manual_seed(0)
        return run_check(_case(CheckpointedNorms(reentrant), torch.randn(4, 16)), backend=backend, train=True,
                         golden=golden)
    ok, bad = check("aot_eager"), check(BAD)
    assert ok.status == "PASS", [(r.name, r.verdict.message) for r in ok.rows]
    assert not any("round as written" in n for n in ok.notes), ok.notes
    assert any("stay float64 in the golden" in n for n in ok.notes), ok.notes
    assert bad.status == "FAIL"


def test_a_finfo_constant_of_the_goldens_dtype_meeting_a_lower_dtype_tensor_is_eagers():
    """No kept cast is involved: fp64's minimum meets the model's fp32 mask (CANINE). The golden is finite and
    is the model computed in fp64 with eager's (fp32) minimum as the mask value."""
    torch.manual_seed(0)
    m, x = MaskFromTheScoresDtype(), torch.randn(2, 6, 16)
    out, mode = _golden(m, x)
    xd = x.double()
    scores = m.q(xd) @ m.k(xd).transpose(-1, -2) / 4
    mask = torch.zeros(2, 1, 6, dtype=torch.float64)
    mask[..., -2:] = torch.finfo(torch.float32).min
    want = (scores + mask).softmax(-1) @ xd
    assert torch.isfinite(out).all() and torch.allclose(out, want, rtol=1e-12, atol=0)
    assert any("finfo constants" in n for n in mode.notes())
