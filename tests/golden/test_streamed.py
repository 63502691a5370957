"""The streamed golden: the same golden as a whole-model fp64 copy, one piece upcast at a time; per-block
verdicts; repeat runs as digests; memory reported; out-of-memory as one line."""
import json

import pytest
import torch

from fusecheck.case import Case, TargetError
from fusecheck.cli.main import main
from fusecheck.check import run_check
from fusecheck.golden.streamed import golden as streamed_golden
from fusecheck.golden.streamed.golden import StreamedGolden
from fusecheck.golden.streamed.plan import make_plan

from models.wide_blocks import build as build_wide  # the repo root is on sys.path (conftest)


class TiedStack(torch.nn.Module):
    """Tied embedding/head (gradient summed over two pieces), a root-level parameter (resident), blocks."""

    def __init__(self, vocab=17, hidden=12, n_blocks=3):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.pos = torch.nn.Parameter(torch.randn(6, hidden) * 0.1)
        self.layers = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.LayerNorm(hidden), torch.nn.Linear(hidden, hidden),
                                                              torch.nn.Tanh()) for _ in range(n_blocks))
        self.head = torch.nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        h = self.embed(ids) + self.pos
        for layer in self.layers:
            h = h + layer(h)
        return self.head(h)


def tied_case():
    torch.manual_seed(0)
    return Case(TiedStack(), (torch.randint(0, 17, (2, 6)),), "tied_stack")


def _golden_whole(model, ids, cot):
    import copy
    m = copy.deepcopy(model).double()
    out = m(ids)
    out.backward(cot)
    return out.detach(), {n: p.grad for n, p in m.named_parameters()}


def test_plan_finds_blocks_units_and_resident_tensors():
    plan = make_plan(TiedStack())
    assert [n for n, _ in plan.blocks] == ["layers.0", "layers.1", "layers.2"]
    assert sorted(n for n, _ in plan.units) == ["embed", "head"]
    assert [n for n, _ in plan.resident] == [""]  # the root owns `pos`
    assert make_plan(torch.nn.Sequential(torch.nn.Linear(2, 2))) is None


def test_streamed_golden_equals_whole_copy_forward_and_gradients():
    model = TiedStack().to(torch.bfloat16)
    ids = torch.randint(0, 17, (2, 6))
    cot = torch.randn(2, 6, 17, dtype=torch.float64)
    want_out, want_grads = _golden_whole(model, ids, cot)
    got = {}
    with StreamedGolden(model, make_plan(model), torch.float64, train=True, on_grad=got.__setitem__) as sg:
        out = model(ids)
        out.backward(cot)
        sg.finish()
    assert out.dtype == torch.float64
    torch.testing.assert_close(out.detach(), want_out, rtol=1e-12, atol=1e-12)
    assert set(got) == set(want_grads)  # tied weight: one name, summed over embed and head
    for name, g in want_grads.items():
        assert got[name].dtype == torch.float64
        torch.testing.assert_close(got[name], g, rtol=1e-12, atol=1e-12)
    assert all(p.dtype == torch.bfloat16 and p.grad is None for p in model.parameters())  # the model is untouched


def test_only_one_piece_is_upcast_at_a_time(monkeypatch):
    active, most = [0], [0]
    real = streamed_golden.upcast

    class Counting:
        def __init__(self, *a, **k):
            self.cm = real(*a, **k)
            self.whole = k.get("recurse", True)

        def __enter__(self):
            active[0] += self.whole
            most[0] = max(most[0], active[0])
            return self.cm.__enter__()

        def __exit__(self, *exc):
            active[0] -= self.whole
            return self.cm.__exit__(*exc)

    monkeypatch.setattr(streamed_golden, "upcast", Counting)
    model = TiedStack().to(torch.bfloat16)
    order = []
    with StreamedGolden(model, make_plan(model), torch.float64, train=True, on_grad=lambda n, g: order.append(n)) as sg:
        model(torch.randint(0, 17, (2, 6))).sum().backward()
        sg.finish()
    assert most[0] == 1
    # gradients arrive during the backward pass, last block first: never all at once at the end
    assert order.index("layers.2.1.weight") < order.index("layers.0.1.weight")


@pytest.mark.parametrize("train", [False, True])
def test_check_rows_and_verdicts_same_streamed_and_whole(train):
    reports = {m: run_check(tied_case(), backend="aot_eager", dtype="bf16", train=train, golden=m)
               for m in ("whole", "streamed")}
    whole, streamed = reports["whole"], reports["streamed"]
    assert whole.golden_mode == "whole"
    assert len(whole.rows) == (15 if train else 1)  # output; embed (tied head), pos, 3 x 4 block tensors
    assert_same_rows(whole, streamed)


def assert_same_rows(whole, streamed) -> None:
    """The streamed report has the whole copy's rows, verdicts and golden metrics (to fp64 rounding)."""
    assert streamed.golden_mode.startswith("streamed")
    assert [r.name for r in whole.rows] == [r.name for r in streamed.rows]
    for a, b in zip(whole.rows, streamed.rows):
        assert a.verdict.code == b.verdict.code
        for k, v in a.vs_golden.values.items():
            assert b.vs_golden.values[k] == pytest.approx(v, rel=1e-9, abs=1e-300, nan_ok=True)


class Residual(torch.nn.Module):
    def __init__(self, hidden=12):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.LayerNorm(hidden), torch.nn.Linear(hidden, hidden), torch.nn.Tanh())

    def forward(self, h):
        return h + self.inner(h)


class SequentialStack(torch.nn.Module):
    """timm's pattern: the blocks in an nn.Sequential (one of them held twice: called twice), an MLP-like
    Sequential of mixed classes inside each block (not a stack)."""

    def __init__(self, vocab=17):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, 12)
        shared = Residual()
        self.blocks = torch.nn.Sequential(Residual(), shared, Residual(), shared)

    def forward(self, ids):
        return self.blocks(self.embed(ids))


class DictStack(SequentialStack):
    """Blocks in an nn.ModuleDict, called by key."""

    def __init__(self, vocab=17):
        super().__init__(vocab)
        self.blocks = torch.nn.ModuleDict({"first": Residual(), "second": Residual(), "third": Residual()})

    def forward(self, ids):
        h = self.embed(ids)
        for block in self.blocks.values():
            h = block(h)
        return h


def test_a_sequential_or_dict_of_one_class_is_a_layer_stack_and_a_mixed_sequential_is_not():
    assert [n for n, _ in make_plan(SequentialStack()).blocks] == ["blocks.0", "blocks.1", "blocks.2"]  # 3 is 1
    assert [n for n, _ in make_plan(DictStack()).blocks] == ["blocks.first", "blocks.second", "blocks.third"]
    mixed = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU(), torch.nn.Linear(4, 4))
    assert make_plan(mixed) is None
    assert make_plan(TiedStack()).source == "children of 'layers'"  # the ModuleList, not its blocks' Sequentials


@pytest.mark.parametrize("stack", [SequentialStack, DictStack])
def test_sequential_and_dict_stacks_stream_the_whole_copys_golden(stack):
    def case():
        torch.manual_seed(0)
        return Case(stack(), (torch.randint(0, 17, (2, 6)),), stack.__name__)
    reports = {m: run_check(case(), backend="aot_eager", dtype="bf16", train=True, golden=m)
               for m in ("whole", "streamed")}
    assert len(reports["whole"].rows) > 1
    assert_same_rows(reports["whole"], reports["streamed"])


def test_auto_streams_models_with_blocks_when_memory_is_short_and_copies_the_others(monkeypatch):
    from fusecheck.golden import choose

    assert run_check(tied_case(), backend="aot_eager").golden_mode == "whole"  # fits: the fast copy
    monkeypatch.setattr(choose, "available_bytes", lambda device: 0)
    assert run_check(tied_case(), backend="aot_eager").golden_mode.startswith("streamed")
    assert run_check(Case(torch.nn.Linear(4, 4), (torch.randn(2, 4),), "lin"), backend="aot_eager").golden_mode == "whole"
    with pytest.raises(TargetError, match="needs blocks"):
        run_check(Case(torch.nn.Linear(4, 4), (torch.randn(2, 4),), "lin"), backend="aot_eager", golden="streamed")


def test_blocks_glob_and_a_glob_matching_nothing():
    r = run_check(tied_case(), backend="aot_eager", blocks="layers.*")
    assert [b.name for b in r.blocks] == ["layers.0", "layers.1", "layers.2"]
    with pytest.raises(TargetError, match="matches no submodule"):
        run_check(tied_case(), backend="aot_eager", blocks="transformer.h.*")


def test_regional_names_the_block_a_planted_compile_bug_makes_worse(tmp_path):
    out = tmp_path / "r.json"
    assert main(["check", "tests/planted/block_rounding.py:build", "--regional", "--json", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["first_worse_block"] == "blocks.2"
    verdicts = {b["name"]: b["verdict"] for b in data["blocks"]}
    assert verdicts == {"blocks.0": "PASS", "blocks.1": "PASS", "blocks.2": "FAIL", "blocks.3": "PASS"}
    assert data["blocks"][2]["ratio"] > 100 and data["regional"] is True


def test_regional_is_quiet_on_a_correct_model():
    r = run_check(build_wide(), regional=True)
    assert r.status == "PASS" and r.first_worse_block is None
    assert all(b.compiled_observed and not b.worse for b in r.blocks) and len(r.blocks) == 4


def test_whole_model_compile_gives_eager_block_errors_and_says_so():
    r = run_check(build_wide(), backend="aot_eager")
    assert all(b.to_dict()["compiled_rmse"] is None and b.to_dict()["eager_rmse"] > 0 for b in r.blocks)
    assert any("--regional" in n for n in r.notes)


def test_memory_is_reported_per_phase(tmp_path):
    r = run_check(build_wide(), backend="aot_eager", train=True)
    assert {"eager", "compiled", "golden", "blocks", "compare"} <= set(r.memory)
    assert all(v.get("host_peak_rss_bytes", v.get("host_peak_rss_bytes_since_start", 0)) > 0 for v in r.memory.values())
    assert r.model_bytes == sum(p.numel() * 4 for p in build_wide().model.parameters())


class OomInFp64(torch.nn.Linear):
    """Runs in the run dtype; raises the allocator's out-of-memory error when its weights are fp64."""

    def forward(self, x):
        if self.weight.dtype == torch.float64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has ...")
        return super().forward(x)


def oom_case():
    return Case(torch.nn.Sequential(OomInFp64(4, 4)), (torch.randn(2, 4),), "oom")


def test_out_of_memory_is_one_line_naming_phase_need_and_help(capsys):
    assert main(["check", f"{__file__}:oom_case", "--backend", "eager"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert "golden phase" in err[0] and "3.50 GiB" in err[0] and "--golden-device cpu" in err[0]


def test_golden_on_another_device_is_moved_back_for_comparison():
    r = run_check(tied_case(), backend="aot_eager", golden_device="cpu", train=True, golden="streamed")
    assert r.status == "PASS" and r.golden_mode.startswith("streamed")


def test_a_large_parameter_changed_in_place_is_refused(monkeypatch):
    import fusecheck.runs.execute as ex

    class Drifts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(4))

        def forward(self, x):
            with torch.no_grad():
                self.w.add_(1)
            return x * self.w

    monkeypatch.setattr(ex, "FULL_COPY_PARAM_BYTES", 0)  # as if the parameter were large
    with pytest.raises(TargetError, match="changes its parameter 'w' in place"):
        run_check(Case(Drifts(), (torch.randn(4),), "drifts"), backend="eager")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("golden_device", [None, "cpu"])
def test_streamed_golden_on_cuda_matches_whole_and_can_run_on_the_host(golden_device):
    whole = run_check(tied_case(), dtype="bf16", device="cuda", train=True, golden="whole")
    # `auto` takes the whole copy at this size (golden/choose.py): streamed is asked for
    streamed = run_check(tied_case(), dtype="bf16", device="cuda", train=True, golden="streamed",
                         golden_device=golden_device)
    assert streamed.golden_mode.startswith("streamed") and streamed.status == whole.status == "PASS"
    for a, b in zip(whole.rows, streamed.rows):
        assert a.name == b.name and a.verdict.code == b.verdict.code
        assert b.vs_golden.rmse == pytest.approx(a.vs_golden.rmse, rel=1e-6)
    assert "device_peak_bytes" in streamed.memory["golden"]


class ReadsHeadDtype(TiedStack):
    """Casts to its head's weight dtype from outside the head (as ViT does with its patch projection)."""

    def forward(self, ids):
        h = self.embed(ids) + self.pos
        for layer in self.layers:
            h = h + layer(h)
        return self.head(h.to(self.head.weight.dtype))


def test_a_model_reading_a_streamed_pieces_dtype_reads_the_golden_dtype():
    """The head's weight reads as float64 outside the head (the guard): streamed, no step aside."""
    torch.manual_seed(0)
    r = run_check(Case(ReadsHeadDtype(), (torch.randint(0, 17, (2, 6)),), "reads_dtype"), backend="aot_eager",
                  dtype="bf16", train=True, golden="streamed")
    assert r.status == "PASS" and r.golden_mode.startswith("streamed")
    assert not any("stepped aside" in n for n in r.notes)


def test_small_pieces_outside_the_blocks_stay_upcast_large_ones_stream():
    plan = make_plan(build_wide().model)  # embed and final norm are smaller than a block
    assert [n for n, _ in plan.resident_units] == ["embed", "norm"] and plan.units == []


def test_an_unknown_golden_device_is_one_line_exit_2(capsys):
    assert main(["check", "tests/planted/block_rounding.py:build", "--golden-device", "foo", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown device 'foo'" in err[0]
