"""The streamed golden is exactly as general as the whole-model fp64 copy: differential tests on a generated
family of block models (tests/planted/streamed_family.py), the guard's answers, stepping aside, and planted
mixed-precision regressions that fail through the streamed golden (and the default, which takes the whole
copy where it fits)."""
import pytest
import torch

from fusecheck.case import Case, load_target
from fusecheck.cli.main import main
from fusecheck.runs.execute import run_once, state_snapshot
from fusecheck.runs.cast import prepare_case
from fusecheck.golden.fallback import GoldenError, GoldenFallback
from fusecheck.golden import modes as golden_runs
from fusecheck.golden.modes import GOLDEN_MODES, GoldenRequest
from fusecheck.check import run_check
from fusecheck.golden.streamed import golden as streamed_golden
from fusecheck.golden.streamed.guard import Guard, StreamedLeak
from fusecheck.golden.streamed.plan import make_plan

from tests.planted.streamed_family import PATTERNS, build_case, recipe

SEEDS = range(12)
MIXED = "tests/planted/mixed_precision.py:"


def goldens(r, dtype: torch.dtype, train: bool) -> dict[str, tuple[dict[str, torch.Tensor], list[str]]]:
    """Both golden modes on one prepared case of recipe `r`: {mode: (results, notes)}."""
    prepared = prepare_case(build_case(r), dtype, "cpu")
    state = state_snapshot(prepared)
    cotangents = run_once(prepared.model, prepared, train=train, state=state).cotangents
    out = {}
    for mode in ("whole", "streamed"):
        req = GoldenRequest(prepared, state, train, cotangents, torch.float64, torch.device("cpu"), (),
                            make_plan(prepared.model, r.blocks))
        got: dict[str, torch.Tensor] = {}
        with GoldenFallback(torch.float64, run=dtype):  # the model's casts kept, as the check does
            GOLDEN_MODES[mode](req, lambda n, t: got.__setitem__(n, t.detach().clone()))
        out[mode] = (got, req.notes)
    kept = prepared.model.state_dict(keep_vars=True).values()
    assert all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in kept)  # the guard's classes are undone
    return out


def assert_same_golden(r, dtype, train) -> None:
    o = goldens(r, dtype, train)
    (whole, _), (streamed, notes) = o["whole"], o["streamed"]
    where = f"{r.describe()}, {dtype}, {'train' if train else 'forward'}"
    assert not notes, f"{where}: the streamed golden stepped aside: {notes}"
    assert set(streamed) == set(whole), where
    for name, want in whole.items():
        got = streamed[name]
        assert got.dtype == want.dtype, f"{where}: {name}"
        # the same ops on the same values: bitwise in practice; sums of a shared weight's gradient over its
        # uses may add in another order, hence fp64 rounding
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14, msg=lambda m: f"{where}: {name}: {m}")


def test_the_family_meets_every_pattern_on_and_off():
    recipes = [recipe(s) for s in SEEDS]
    for p in PATTERNS:
        assert {getattr(r, p) for r in recipes} == {True, False}, p
    assert {r.vocab for r in recipes} == {11, 16}


@pytest.mark.parametrize("seed", SEEDS)
def test_streamed_golden_is_the_whole_golden(seed):
    r = recipe(seed)
    assert_same_golden(r, torch.bfloat16, train=False)
    assert_same_golden(r, torch.bfloat16, train=True)
    assert_same_golden(r, torch.float32, train=seed % 2 == 0)


def test_without_the_guard_the_family_breaks(monkeypatch):
    """The differential test sees the guard: without it, most of the family gets another golden, silently
    (a dtype read outside a block rounds the fp64 golden) or by an error that makes it step aside."""
    real = streamed_golden.StreamedGolden.__init__
    monkeypatch.setattr(streamed_golden.StreamedGolden, "__init__",
                        lambda self, *a, **k: real(self, *a, **{**k, "guard": False}))
    broken = 0
    for seed in SEEDS:
        try:
            assert_same_golden(recipe(seed), torch.bfloat16, train=False)
        except AssertionError:
            broken += 1
    assert broken >= 4


ROWS = [  # (seed, dtype, train, backend)
    (0, "bf16", True, "aot_eager"),
    (1, "fp32", False, "aot_eager"),
    (2, "bf16", False, MIXED + "faithful"),
    (3, "bf16", True, MIXED + "faithful"),
    pytest.param(4, "bf16", True, "inductor", marks=pytest.mark.slow),
    (5, "fp32", True, "aot_eager"),  # the golden does not depend on the backend: one Inductor row is enough
]


@pytest.mark.parametrize("seed,dtype,train,backend", ROWS)
def test_rows_and_verdicts_are_the_same_with_either_golden(seed, dtype, train, backend):
    r = recipe(seed)
    reports = {m: run_check(build_case(r), backend=backend, dtype=dtype, train=train, golden=m, blocks=r.blocks,
                            block_verdicts=False) for m in ("whole", "streamed")}
    whole, streamed = reports["whole"], reports["streamed"]
    assert streamed.golden_mode.startswith("streamed") and not any("stepped aside" in n for n in streamed.notes)
    assert [x.name for x in streamed.rows] == [x.name for x in whole.rows]
    for a, b in zip(whole.rows, streamed.rows):
        assert a.verdict.code == b.verdict.code, a.name
        for k, v in a.vs_golden.values.items():
            assert b.vs_golden.values[k] == pytest.approx(v, rel=1e-9, abs=1e-300, nan_ok=True), (a.name, k)


# -- the guard itself ------------------------------------------------------------------------------------

def test_guard_answers_as_the_whole_copy_and_restores_the_tensors():
    lin = torch.nn.Linear(3, 3).to(torch.bfloat16)
    buf = torch.ones(3, dtype=torch.bfloat16)
    x = torch.randn(3, dtype=torch.float64)
    want = torch.nn.functional.linear(x, lin.weight.double(), lin.bias.double())
    with Guard({"weight": lin.weight, "bias": lin.bias, "buf": buf}, torch.float64) as g:
        w = lin.weight
        assert w.dtype == torch.float64 and buf.dtype == torch.float64
        assert (w.itemsize, w.element_size(), w.nbytes, w.type()) == (8, 8, 72, "torch.DoubleTensor")
        assert torch.finfo(w.dtype).eps == torch.finfo(torch.float64).eps
        assert isinstance(w, torch.nn.Parameter) and w.shape == (3, 3) and w.requires_grad
        # torch calls get the fp64 values (exact upcasts), not the bf16 tensor
        assert x.type_as(w).dtype == torch.float64 and torch.zeros_like(buf).dtype == torch.float64
        assert w.new_zeros(2).dtype == torch.float64 and w.data.dtype == torch.float64
        assert torch.equal(lin(x), want)  # the module's forward on its own (guarded) weights
        # other tensors are untouched: no torch function on them, so no fast path changes
        assert not torch.overrides.has_torch_function((x,)) and type(x) is torch.Tensor
        with pytest.raises(StreamedLeak, match="writes to buf"):
            buf.add_(1)
        with pytest.raises(StreamedLeak, match="consumes weight"):  # torch function bypassed: the watch sees it
            with torch._C.DisableTorchFunctionSubclass():
                torch.mul(w, 2)
        assert g.leaks
    assert type(lin.weight) is torch.nn.Parameter and type(buf) is torch.Tensor
    assert lin.weight.dtype == torch.bfloat16 and torch.equal(buf, torch.ones(3, dtype=torch.bfloat16))


# -- stepping aside --------------------------------------------------------------------------------------

class Scale(torch.autograd.Function):
    """A custom autograd Function: its input's gradient lands on that input itself."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, (g * x).sum(0).sum(0)


class Blk(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(self.fc(x))


class FnOnABlocksBias(torch.nn.Module):
    """Passes block 0's bias to a custom autograd Function at the root: in train its gradient would reach
    the bf16 parameter, not its fp64 copy, so the streamed golden must step aside."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(Blk() for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return Scale.apply(x, self.layers[0].fc.bias)


def fn_case():
    torch.manual_seed(0)
    return Case(FnOnABlocksBias(), (torch.randn(2, 6, 8),), "fn_on_a_blocks_bias")


def test_a_leak_steps_aside_to_the_whole_golden_and_says_why():
    streamed = run_check(fn_case(), backend="aot_eager", dtype="bf16", train=True, golden="streamed")
    whole = run_check(fn_case(), backend="aot_eager", dtype="bf16", train=True, golden="whole")
    note = next(n for n in streamed.notes if "stepped aside" in n)
    assert "layers.0.fc.bias" in note and "whole-model float64 copy instead" in note and "free" in note
    assert [(x.name, x.verdict.code) for x in streamed.rows] == [(x.name, x.verdict.code) for x in whole.rows]
    for a, b in zip(whole.rows, streamed.rows):
        assert b.vs_golden.rmse == pytest.approx(a.vs_golden.rmse, rel=1e-12)
    # forward only, nothing to step aside for: the Function's body computes on the fp64 copy
    assert not any("stepped aside" in n for n in run_check(fn_case(), backend="aot_eager", dtype="bf16",
                                                           golden="streamed").notes)


def test_a_leak_without_room_for_the_whole_copy_is_exit_3_with_the_reason(monkeypatch, capsys):
    monkeypatch.setattr(golden_runs, "free_bytes", lambda device: 0)
    with pytest.raises(GoldenError, match="cannot give the whole-model golden.*layers.0.fc.bias.*needs about"):
        run_check(fn_case(), backend="aot_eager", dtype="bf16", train=True, golden="streamed")
    assert main(["check", f"{__file__}:fn_case", "--backend", "eager", "--dtype", "bf16", "--train", "--golden",
                 "streamed"]) == 3
    assert "cannot give the whole-model golden" in capsys.readouterr().err


class RoutedFn(FnOnABlocksBias):
    """Top-k decisions in every block (the golden follows the compiled run's choices) and the leak above."""

    def forward(self, x):
        for layer in self.layers:
            v, i = x.topk(3, dim=-1)
            x = x + layer(x) + 0.1 * torch.zeros_like(x).scatter(-1, i, v)
        return Scale.apply(x, self.layers[0].fc.bias)


def test_stepping_aside_restarts_the_decision_follower():
    """The attempt that failed made decisions under the follower: the whole golden starts at decision 0."""
    torch.manual_seed(0)
    r = run_check(Case(RoutedFn(), (torch.randn(2, 6, 8),), "routed"), backend="aot_eager", dtype="bf16", train=True,
                  golden="streamed")
    assert any("stepped aside" in n for n in r.notes)
    assert not any("could not be lined up" in n for n in r.notes) and r.status == "PASS"


def test_grad_mode_dependent_paths_are_the_whole_goldens():
    """nn.TransformerEncoderLayer takes a fused fast path without grad: a piece's checkpointed forward
    runs with grad as the whole copy's does, so the same path and the same bits."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)
    prepared = prepare_case(Case(enc, (torch.randn(2, 5, 16),), "encoder"), torch.bfloat16, "cpu")
    state = state_snapshot(prepared)
    for train in (False, True):
        cotangents = run_once(prepared.model, prepared, train=train, state=state).cotangents
        got = {}
        for mode in ("whole", "streamed"):
            req = GoldenRequest(prepared, state, train, cotangents, torch.float64, torch.device("cpu"), (),
                                make_plan(prepared.model))
            got[mode] = {}
            GOLDEN_MODES[mode](req, lambda n, t, d=got[mode]: d.__setitem__(n, t.detach().clone()))
        assert set(got["whole"]) == set(got["streamed"])
        assert all(torch.equal(got["whole"][k], got["streamed"][k]) for k in got["whole"]), train


class FailsInFp64Backward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if g.dtype == torch.float64:
            raise RuntimeError("no float64 backward here")
        return g


class FailingFirstBlock(FnOnABlocksBias):
    def forward(self, x):
        x = FailsInFp64Backward.apply(x)
        for layer in self.layers:
            x = x + layer(x)
        return x


def test_a_failure_after_results_were_judged_cannot_step_aside():
    """Gradients reach the sink during the backward (last block first): a golden that fails after that is
    not replaced (a row is judged once), and says so."""
    torch.manual_seed(0)
    case = Case(FailingFirstBlock(), (torch.randn(2, 6, 8),), "fails_late")
    with pytest.raises(GoldenError, match=r"failed after \d+ result\(s\) were judged.*--golden whole"):
        run_check(case, backend="aot_eager", dtype="bf16", train=True, golden="streamed")


# -- planted mixed-precision regressions, through the default golden -------------------------------------

@pytest.mark.parametrize("target,backend,train,status", [
    ("residual_build", MIXED + "faithful", False, "PASS"),
    ("residual_build", "tests/planted/backends.py:drop_upcast", False, "FAIL"),  # the fp32 residual lost
    ("casts_build", MIXED + "faithful", True, "PASS"),
    ("casts_build", "tests/planted/backends.py:bf16_matmul", True, "FAIL"),
])
def test_planted_mixed_precision_regressions_fail_and_correct_versions_pass(target, backend, train, status):
    r = run_check(load_target(MIXED + target), backend=backend, train=train, golden="streamed")
    assert r.golden_mode.startswith("streamed") and not any("stepped aside" in n for n in r.notes)
    assert r.status == status and r.exit_code == {"PASS": 0, "FAIL": 1}[status]
    if status == "FAIL":
        assert r.rows[0].verdict.code == "worse_than_eager"


def test_planted_residual_regression_is_exit_1_from_the_cli():
    for golden in ("auto", "streamed"):  # auto takes the whole copy here (it fits): both goldens catch it
        assert main(["check", MIXED + "residual_build", "--backend", "tests/planted/backends.py:drop_upcast", "-q",
                     "--golden", golden]) == 1


def test_the_whole_golden_keeps_complex_buffers_complex():
    """`Module.to(float64)` casts a complex64 buffer to float64, dropping its imaginary part: the golden then
    computed another function and a 1% error on every output passed against it. Each tensor is cast by kind."""
    from dataclasses import replace

    from fusecheck.runs.cast import golden_case
    case = prepare_case(build_case(replace(recipe(0), complex_buffer=True)), torch.bfloat16, "cpu")
    assert case.model.freqs.dtype == torch.complex64          # bf16 has no complex dtype: kept
    gold = golden_case(case, torch.float64)
    assert gold.model.freqs.dtype == torch.complex128
    assert torch.equal(gold.model.freqs, case.model.freqs.to(torch.complex128))
    assert gold.model.embed.weight.dtype == torch.float64
