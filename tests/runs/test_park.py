"""Compiled results wait on the host from the repeat run on, until the judge reaches them (fusecheck/runs/park.py):
they come back bit for bit under the same keys (one row at a time to the judge), the device's memory is free
meanwhile (CUDA), small results and the host itself are left alone, and a race on either call is still caught
while they are parked."""
import pytest
import torch

from fusecheck.case import load_target
from fusecheck.check import run_check
from fusecheck.runs import park
from fusecheck.runs.execute import RunResult

CUDA = torch.cuda.is_available()


def _result(device, n=1000):
    g = torch.Generator().manual_seed(0)
    t = {k: torch.randn(n, generator=g).to(device) for k in ("out", "g.w", "state")}
    return RunResult({"output": t["out"]}, {"grad.w": t["g.w"].bfloat16()}, after={"mutated.state.b": t["state"]})


def _bits(r: RunResult):
    return {k: (v.dtype, v.device, v.cpu().view(torch.int16 if v.dtype == torch.bfloat16 else torch.int32).tolist())
            for k, v in r.all(("mutated.state.b",)).items()}


def _back(r: RunResult, moved: dict) -> None:
    """What the judge does, row by row: each parked result to the device it came from."""
    for d in (r.outputs, r.grads, r.after):
        for k in d:
            if k in moved:
                d[k] = d[k].to(moved[k])


def test_small_results_and_the_host_stay_where_they_are():
    r = _result("cpu", n=4)
    before = {k: id(v) for k, v in r.all(("mutated.state.b",)).items()}
    assert park.park(r, torch.device("cpu")) == {}
    assert {k: id(v) for k, v in r.all(("mutated.state.b",)).items()} == before


def test_parked_results_come_back_bit_for_bit_under_the_same_keys():
    r = _result("cpu")
    device_copy, want = r.outputs["output"], _bits(r)
    moved = park.park(r, torch.device("cpu"), force=True)
    assert moved == dict.fromkeys(("output", "grad.w", "mutated.state.b"), torch.device("cpu"))
    assert r.outputs["output"] is not device_copy and _bits(r) == want  # the host copy, same bits
    _back(r, moved)
    assert _bits(r) == want


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_on_cuda_the_device_memory_is_free_while_parked(monkeypatch):
    monkeypatch.setattr(park, "PARK_MIN_BYTES", 1 << 20)
    r = _result("cuda", n=1 << 22)  # 16 + 8 + 16 MiB, on cuda:0 while the run's device reads "cuda"
    want = _bits(r)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated()
    moved = park.park(r, torch.device("cuda"))
    assert moved and torch.cuda.memory_allocated() <= held - (40 << 20)
    assert all(v.device.type == "cpu" and v.is_pinned() for v in r.all(("mutated.state.b",)).values())
    _back(r, moved)
    assert _bits(r) == want and all(v.is_cuda for v in r.all(("mutated.state.b",)).values())


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_on_cuda_the_judge_fetches_each_parked_row(monkeypatch):
    from fusecheck.check.rows import RowJudge
    from fusecheck.policy import Policy
    monkeypatch.setattr(park, "PARK_MIN_BYTES", 1 << 20)
    g = torch.randn(1 << 20, dtype=torch.float64, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    eager, compiled = {"output": g.bfloat16()}, {"output": (g * 1.01).bfloat16()}
    plain = RowJudge(dict(eager), dict(compiled), Policy())
    plain.judge("output", g)
    first = RunResult(dict(compiled))
    moved = park.park(first, torch.device("cuda"))
    assert moved == {"output": g.device} and first.outputs["output"].device.type == "cpu"
    held = RowJudge(dict(eager), dict(first.outputs), Policy(), parked=moved)
    held.judge("output", g)
    assert held.rows["output"].vs_golden.rmse == plain.rows["output"].vs_golden.rmse
    assert held.rows["output"].verdict.status == plain.rows["output"].verdict.status


@pytest.mark.parametrize("race", ["first_call_race", "second_call_race"])
def test_a_race_is_caught_while_the_first_run_is_parked(monkeypatch, race):
    # the host is never parked in use: force it here, so that the check runs with compiled's first results moved
    # from the repeat run on (the judge fetching each row)
    calls = []
    monkeypatch.setattr(park, "_worth", lambda entries, d: calls.append(len(entries)) or True)
    r = run_check(load_target("models/mlp.py:build"), backend="tests/planted/backends.py:" + race, train=True)
    # parked: compiled's first results, and eager's results on the rolled inputs while the compiled call runs
    assert len(calls) == 2 and all(calls) and r.exit_code == 1 and not r.compiled_repeatable
    assert all(row.verdict.code == "nondeterministic_compiled" for row in r.rows if not row.passed)


def test_a_correct_compile_gives_the_same_rows_parked_or_not(monkeypatch):
    plain = run_check(load_target("models/mlp.py:build"), backend="aot_eager", train=True)
    monkeypatch.setattr(park, "_worth", lambda entries, d: True)
    moved = run_check(load_target("models/mlp.py:build"), backend="aot_eager", train=True)
    assert plain.exit_code == moved.exit_code == 0 and moved.compiled_repeatable
    assert [(a.name, a.vs_golden.rmse) for a in plain.rows] == [(b.name, b.vs_golden.rmse) for b in moved.rows]


def test_a_parked_result_goes_back_to_its_own_device_so_a_device_mismatch_still_fails():
    # parked from a device other than eager's (a second GPU; here the meta device stands in for it): the judge
    # must not quietly move it to eager's device, or a compiled result on the wrong device would PASS
    from fusecheck.check.rows import RowJudge
    from fusecheck.policy import Policy
    g = torch.randn(64, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    judge = RowJudge({"output": g.float()}, {"output": g.float()}, Policy(), parked={"output": torch.device("meta")})
    judge.judge("output", g)
    assert judge.rows["output"].verdict.code == "device_mismatch"
    same = RowJudge({"output": g.float()}, {"output": g.float()}, Policy(), parked={"output": torch.device("cpu")})
    same.judge("output", g)
    assert same.rows["output"].passed
