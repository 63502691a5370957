"""Ops with no fp64 kernel: the golden runs them in fp32 and says so; a golden that cannot run is exit 3."""
import pytest
import torch

from fusecheck.case import Case
from fusecheck.cli.main import main
from fusecheck.golden.fallback import GoldenError, GoldenFallback
from fusecheck.check import run_check


@torch.library.custom_op("fusecheck_test::no_fp64_scale", mutates_args=())
def no_fp64_scale(x: torch.Tensor) -> torch.Tensor:
    """Like MoE's grouped_mm: refuses float64 with an error, works in lower precisions."""
    if x.dtype == torch.float64:
        raise RuntimeError(f"Expected x to be Float32, BFloat16 or Float16, got {x.dtype}")
    return x * 3


@no_fp64_scale.register_fake
def _(x):
    return torch.empty_like(x)


no_fp64_scale.register_autograd(lambda ctx, grad: torch.ops.fusecheck_test.no_fp64_scale(grad))


@torch.library.custom_op("fusecheck_test::bf16_only", mutates_args=())
def bf16_only(x: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.bfloat16:
        raise RuntimeError(f"bf16_only got {x.dtype}")
    return x + 1


@bf16_only.register_fake
def _(x):
    return torch.empty_like(x)


class UsesNoFp64(torch.nn.Module):
    def forward(self, x):
        return torch.ops.fusecheck_test.no_fp64_scale(x.sin()).cos()


class UsesBf16Only(torch.nn.Module):
    def forward(self, x):
        return torch.ops.fusecheck_test.bf16_only(x) * 2


def uses_bf16_only():
    return Case(UsesBf16Only(), (torch.randn(8, 8),), "uses_bf16_only")


def test_only_the_failing_op_falls_back_and_results_come_back_in_fp64():
    x = torch.randn(16, dtype=torch.float64)
    with GoldenFallback(torch.float64) as fb:
        y = torch.ops.fusecheck_test.no_fp64_scale(x.sin()).cos()
        z = x.exp()
    assert y.dtype == torch.float64 and z.dtype == torch.float64
    assert set(fb.fell_back) == {"no_fp64_scale"}
    torch.testing.assert_close(y, (x.sin().float() * 3).double().cos())
    assert "no_fp64_scale has no float64 kernel" in fb.notes()[0] and "float32-precise" in fb.notes()[0]


def test_a_model_that_works_in_fp64_gets_no_fallback():
    with GoldenFallback(torch.float64) as fb:
        torch.nn.Linear(4, 4).double()(torch.randn(2, 4, dtype=torch.float64)).sum()
    assert fb.fell_back == {} and fb.notes() == []


def test_an_op_failing_in_both_dtypes_raises_its_first_error():
    with GoldenFallback(torch.float64), pytest.raises(RuntimeError, match="got torch.float64"):
        torch.ops.fusecheck_test.bf16_only(torch.randn(4, dtype=torch.float64))


def test_check_passes_with_the_fallback_named_in_the_report():
    r = run_check(Case(UsesNoFp64(), (torch.randn(8, 8),), "moe_like"), backend="aot_eager", dtype="bf16", train=True)
    assert r.status == "PASS"
    assert any("no_fp64_scale has no float64 kernel" in n for n in r.notes)


def test_golden_that_cannot_run_is_a_tool_error_not_a_verdict(capsys):
    with pytest.raises(GoldenError, match="golden run"):
        run_check(uses_bf16_only(), backend="eager", dtype="bf16")
    assert main(["check", f"{__file__}:uses_bf16_only", "--backend", "eager", "--dtype", "bf16"]) == 3
    assert "golden run of 'uses_bf16_only' failed" in capsys.readouterr().err


def test_a_target_failing_in_eager_is_bad_input(capsys):
    assert main(["check", f"{__file__}:uses_bf16_only", "--backend", "eager", "--dtype", "fp32"]) == 2
    assert "fails in eager mode" in capsys.readouterr().err


class CastsItsInput(torch.nn.Module):
    """`x.float()` before a layer: in the fp64 golden the layer meets an fp32 activation beside fp64 weights."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x.float())


def test_a_fallback_caused_by_the_models_own_cast_is_named_as_such():
    """addmm has an fp64 kernel: the operand that arrived cast is upcast (exactly) and the op runs in fp64,
    named as such, not as a missing kernel nor as an fp32 fallback. In a check the golden knows eager's
    dtype, and `x.float()` (an upcast, or nothing, in eager) stays fp64 in the golden: no fallback then, and
    the note says the cast was kept."""
    with GoldenFallback(torch.float64) as fb:
        torch.nn.Linear(4, 4).double()(torch.randn(2, 4, dtype=torch.float64).float())
    assert fb.notes() and "addmm received operands the model cast below float64" in fb.notes()[0]
    assert "has no float64 kernel" not in fb.notes()[0] and not fb.fell_back
    r = run_check(Case(CastsItsInput(), (torch.randn(4, 8),), "casts_input"), backend="aot_eager")
    assert r.status == "PASS" and not any("the model casts inside its forward" in n for n in r.notes), r.notes
    assert any("_to_copy to float32 x1" in n for n in r.notes), r.notes


class MasksWithDefaultDtype(torch.nn.Module):
    """transformers' XGLM attention: the mask value made without a dtype, `torch.full((), finfo(x.dtype).min)`,
    which in fp64 does not fit torch's fp32 default. `divisor` 2: a value derived from it (finfo.min / 2),
    which the golden's finfo-constant rule does not reach."""

    def __init__(self, divisor: int = 1):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.divisor = divisor

    def forward(self, x):
        scores = self.proj(x) @ x.transpose(-1, -2)
        causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=x.device).tril()
        low = torch.finfo(scores.dtype).min / self.divisor
        scores = torch.where(causal, scores, torch.full((), low, device=x.device))
        return scores.softmax(-1) @ x


def masks_with_default_dtype(divisor: int = 2):
    torch.manual_seed(0)
    return MasksWithDefaultDtype(divisor), (torch.randn(2, 12, 16),)


def five_percent_larger(gm, example_inputs):
    """A planted regression well past bf16's rounding (~6 of its ulps) and fp32's."""
    return lambda *args: [o * 1.05 if o.is_floating_point() else o for o in gm(*args)]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("backend,code", [("aot_eager", 0), (f"{__file__}:five_percent_larger", 1)])
def test_a_model_making_constants_in_the_default_dtype_gets_a_golden_in_fp64(dtype, backend, code):
    """Plain fp64 fails on the model (the first run raises, like XGLM's); the golden runs again with torch's
    default dtype set to fp64, says so, and judges: a correct compile passes, 5% too large fails. Torch's
    default is the caller's again afterwards, and the judging never ran under fp64's."""
    case = masks_with_default_dtype()
    with pytest.raises(RuntimeError, match="overflow"):
        case[0].double()(case[1][0].double())
    r = run_check(Case(*case, "masks_with_default_dtype"), backend=backend, dtype=dtype, train=True)
    assert r.exit_code == code, [(row.name, row.verdict.code, row.verdict.message) for row in r.rows]
    assert any("default dtype set to torch.float64" in n for n in r.notes)
    assert torch.get_default_dtype() == torch.float32
    assert all(row.vs_golden is not None for row in r.rows)  # every row judged against the golden


@pytest.mark.parametrize("backend,code", [("aot_eager", 0), (f"{__file__}:five_percent_larger", 1)])
def test_the_mask_value_read_from_the_dtype_is_eagers_in_the_golden(backend, code):
    """XGLM's own pattern, finfo(scores.dtype).min itself: the golden takes eager's dtype's minimum (it fits
    the default dtype, so no rerun), and judges as before."""
    case = masks_with_default_dtype(divisor=1)
    r = run_check(Case(*case, "masks_with_finfo_min"), backend=backend, dtype="fp32", train=True)
    assert r.exit_code == code, [(row.name, row.verdict.code, row.verdict.message) for row in r.rows]
    assert any("finfo constants of eager's dtype" in n for n in r.notes), r.notes
    assert not any("default dtype set to torch.float64" in n for n in r.notes)


class BlocksMaskingWithDefaultDtype(torch.nn.Module):
    """Two such blocks in a ModuleList: the per-block replays run too, under the golden's default dtype."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(MasksWithDefaultDtype(2) for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_every_row_is_judged_under_the_callers_default_dtype_also_per_block(monkeypatch):
    """The golden reran with fp64 as torch's default; the comparisons that judge its rows as they arrive, end to
    end and per block, run with the caller's default (one helper, golden/judging_scope.py: as_caller)."""
    from fusecheck.golden.streamed import per_block

    seen = []

    def recording(compare):
        def call(*args, **kwargs):
            seen.append((kwargs.get("name", ""), torch.get_default_dtype()))
            return compare(*args, **kwargs)
        return call

    monkeypatch.setattr(per_block, "compare", recording(per_block.compare))
    torch.manual_seed(0)
    r = run_check(Case(BlocksMaskingWithDefaultDtype(), (torch.randn(2, 12, 16),), "blocks_default_dtype"),
                  backend="aot_eager", dtype="fp32")
    assert r.exit_code == 0 and any("default dtype set to torch.float64" in n for n in r.notes), r.notes
    assert seen and {d for _, d in seen} == {torch.float32}, seen  # per-block rows were judged, in fp32's default
    assert torch.get_default_dtype() == torch.float32


def test_as_caller_restores_the_callers_default_dtype_and_leaves_the_modes():
    from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

    from fusecheck.golden.judging_scope import as_caller, default_dtype

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with default_dtype(torch.float64), Mode():
        with default_dtype(torch.float64):  # nested: the outermost caller's is the one restored
            with as_caller():
                assert torch.get_default_dtype() == torch.float32 and _get_current_dispatch_mode() is None
            assert torch.get_default_dtype() == torch.float64 and _get_current_dispatch_mode() is not None
    assert torch.get_default_dtype() == torch.float32
    with as_caller():  # outside any golden scope: the default as it is
        assert torch.get_default_dtype() == torch.float32
