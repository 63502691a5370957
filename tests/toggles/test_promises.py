"""Promises as checks: a toggle that promises bitwise equality with eager, run-to-run bits or batch
invariance FAILs its matrix row when it breaks the promise, even with numbers "not worse than eager"; the
real `deterministic` and `batch_invariant` rows stay quiet on correct code. The planted modes are toggles
registered for the test: a post-grad pass routes one op's result through a custom op that moves one element
by one ULP - always (a strict mode broken on one op), on every other call (nondeterminism), or when the
batch is not the one the check ran (batch dependence)."""
from __future__ import annotations

import contextlib
import itertools
import re

import pytest
import torch

from fusecheck.matrix import run_matrix
from fusecheck.matrix.batch import check_batch_invariance
from fusecheck.matrix.promises import CHECKS, RowContext, verify
from fusecheck.matrix.rows import MatrixRow
from fusecheck.toggles import TOGGLES, Toggle
from fusecheck.toggles.promises import BATCH_INVARIANT, BITWISE_EAGER, NOT_WORSE, PROMISES, RUN_TO_RUN

from tests.planted.tiny_tanh import BATCH  # noqa: E402  (the target's batch)
_calls = itertools.count()


@torch.library.custom_op("fusecheck_plant::nudge", mutates_args=())
def nudge(x: torch.Tensor, mode: str) -> torch.Tensor:
    """One element moved by one ULP: always ('one'), on every other call ('flaky'), or when the batch is not
    BATCH rows ('batch')."""
    out = x.clone()
    if mode == "one" or (mode == "flaky" and next(_calls) % 2) or (mode == "batch" and x.shape[0] != BATCH):
        bits = out.view(-1).view({2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()])
        bits[0] += 1  # the next representable value away from zero, in any float dtype on any device
    return out


@nudge.register_fake
def _(x, mode):
    return torch.empty_like(x)


def _nudge_pass(mode: str):
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class Nudge(CustomGraphPass):
        """Routes the first tanh's result (else the first output) through fusecheck_plant::nudge."""

        def __call__(self, graph: torch.fx.Graph) -> None:
            node = next((n for n in graph.nodes if n.target is torch.ops.aten.tanh.default), None)
            if node is None:
                node = next(iter(graph.output_node().args[0]))
            with graph.inserting_after(node):
                new = graph.call_function(torch.ops.fusecheck_plant.nudge.default, (node, mode))
            node.replace_all_uses_with(new, delete_user_cb=lambda u: u is not new)
            new.meta.update(node.meta)

        def uuid(self):
            return f"fusecheck-test-nudge-{mode}"

    return Nudge()


def planted(name: str, mode: str, promises: tuple[str, ...]) -> Toggle:
    def apply(stack: contextlib.ExitStack) -> None:
        from torch._inductor import config

        stack.enter_context(config.patch(post_grad_custom_post_pass=_nudge_pass(mode)))

    return Toggle(name, f"planted: nudge ({mode})", "post_grad_custom_post_pass", apply, lambda gm: True,
                  promises=promises)


PLANTS = {
    "test.strict_broken": planted("test.strict_broken", "one", (BITWISE_EAGER,)),
    "test.flaky": planted("test.flaky", "flaky", (RUN_TO_RUN,)),
    "test.batch_dependent": planted("test.batch_dependent", "batch", (BATCH_INVARIANT,)),
}

TARGET = "tests/planted/tiny_tanh.py:build_centred"


@pytest.fixture
def plants(monkeypatch):
    for name, toggle in PLANTS.items():
        monkeypatch.setitem(TOGGLES, name, toggle)
    return PLANTS


@pytest.fixture(scope="module")
def case():
    from fusecheck.case import load_target

    return load_target(TARGET)


def test_every_promise_has_a_check_and_every_toggle_promise_is_known():
    assert set(CHECKS) == set(PROMISES)
    assert all(p in PROMISES for t in TOGGLES.values() for p in t.promises)
    assert TOGGLES["deterministic"].promises == (RUN_TO_RUN,)
    assert set(TOGGLES["batch_invariant"].promises) == {RUN_TO_RUN, BATCH_INVARIANT}
    assert TOGGLES["numerics.strict"].promises == (BITWISE_EAGER,)


# -- the detectors alone, without a compile -----------------------------------------------------------
def _rows(x):
    return x.sin() * 2


def _batch_dependent(x):
    return x.sin() * 2 + (x.shape[0] != BATCH) * 2.0 ** -20  # what a batch-size-dependent split would do


@pytest.mark.parametrize("fn, broken", [(_rows, False), (_batch_dependent, True)])
def test_batch_invariance_check_catches_a_batch_dependent_function(fn, broken):
    x = torch.randn(BATCH, 16)
    status, why = check_batch_invariance(_rows, (x,), {}, lambda: fn)
    assert (status == "broken") == broken, why
    if broken:
        assert "sub-batch" in why and "larger batch" in why and "eager's rows are batch invariant" in why
    else:
        assert status is None and "sub-batch 4" in why


def test_batch_invariance_needs_a_batch():
    status, why = check_batch_invariance(_rows, (torch.randn(1, 4),), {}, lambda: _rows)
    assert status == "unverified" and "at least 2 rows" in why
    status, why = check_batch_invariance(lambda x: x.sum(), (torch.randn(4, 4),), {}, lambda: _rows)
    assert status == "unverified" and "no output has the batch dimension" in why


class _Metrics:
    def __init__(self, equal, numel):
        self.bitwise_equal, self.numel = equal, numel


class _Cmp:
    def __init__(self, name, equal, numel=8, notes=()):
        self.name, self.vs_reference, self.notes = name, _Metrics(equal, numel), list(notes)


class _Report:
    status = "PASS"

    def __init__(self, rows, repeatable=True):
        self.rows, self.compiled_repeatable = rows, repeatable


@pytest.mark.parametrize("promise, report, broken", [
    (BITWISE_EAGER, _Report([_Cmp("output", 8), _Cmp("grad.w", 8)]), False),
    (BITWISE_EAGER, _Report([_Cmp("output", 8), _Cmp("grad.w", 7)]), True),
    (RUN_TO_RUN, _Report([_Cmp("output", 8)]), False),
    (RUN_TO_RUN, _Report([_Cmp("output", 8, notes=["compiled output changed between two runs with the same "
                                                    "inputs"])], repeatable=False), True),
])
def test_report_based_checks_on_stub_reports(promise, report, broken):
    row = MatrixRow("r", ("x",), report=report, promises=(NOT_WORSE, promise))
    verify(row, RowContext(None))
    assert (promise in row.broken) == broken and row.verdict == ("FAIL" if broken else "PASS")
    if broken:
        assert ("grad.w: 1/8" if promise == BITWISE_EAGER else "output") in row.broken[promise]


def _real_modes() -> list[str]:
    """The real numerics modes this torch has (2.11 lacks `batch_invariant`: its row would be unsupported,
    which tests/toggles/test_toggles_scope.py covers); an unsupported one must say so, never pass silently."""
    from fusecheck.toggles import ToggleUnsupported, resolve

    real = []
    for name in ("deterministic", "batch_invariant"):
        try:
            for t in resolve([name]):
                t.check()
            real.append(name)
        except ToggleUnsupported as exc:
            assert "not supported" in str(exc)
    return real


# -- end to end: planted violations FAIL their rows; the real rows stay quiet --------------------------
@pytest.mark.slow
def test_planted_broken_promises_fail_their_rows_and_real_modes_keep_theirs(case, plants):
    real = _real_modes()
    m = run_matrix(case, ["test.strict_broken", "test.flaky", "test.batch_dependent", *real])
    rows = {r.name: r for r in m.rows}
    assert rows["baseline"].verdict == "PASS"
    for name, promise in [("test.strict_broken", BITWISE_EAGER), ("test.flaky", RUN_TO_RUN),
                          ("test.batch_dependent", BATCH_INVARIANT)]:
        row = rows[name]
        assert row.report.status == "PASS", f"{name}: the numbers themselves are not worse"
        assert row.verdict == "FAIL" and list(row.broken) == [promise], (name, row.broken)
    assert re.search(r"output: [1-9]\d*/256 elements", rows["test.strict_broken"].broken[BITWISE_EAGER])
    for name in real:
        assert rows[name].verdict == "PASS" and not rows[name].broken and not rows[name].unverified, rows[name].broken
    table, data = m.table(), m.to_dict()
    assert "broke its promise bitwise_eager" in table and "broken: run_to_run" in table
    assert set(data["broken_promises"]) == set(PLANTS) and m.exit_code == 0  # toggle rows are diagnostic


def test_the_strict_adapter_picks_up_an_upstream_key_and_its_promise_is_checked(torch_config_entries, case):
    """torch 2.13 has no `numerics` key: with one planted in the config, numerics.strict applies it; Inductor
    ignores the planted key, so the promise of bitwise equality is checked and broken on this fp32 target."""
    from torch._inductor import config
    from torch.utils._config_module import _Config, _ConfigEntry

    from fusecheck.toggles import ToggleUnsupported, toggled
    from fusecheck.toggles.upstream import MODES, find_key

    with pytest.raises(ToggleUnsupported, match="numerics.strict.*not supported.*numerics='strict'"):
        with toggled(["numerics.strict"]):
            pass
    try:  # torch 2.13 names the entry; 2.11's takes the config alone
        entry = _ConfigEntry(_Config(default="default"), "numerics")
    except TypeError:
        entry = _ConfigEntry(_Config(default="default"))
    torch_config_entries.setitem(config._config, "numerics", entry)
    assert find_key(MODES[0]) == ("numerics", "strict")
    with toggled(["numerics.strict"]):
        assert config.numerics == "strict"
    assert config.numerics == "default"
    m = run_matrix(case, ["numerics.strict"])
    row = m.rows[1]
    assert row.promises == (NOT_WORSE, BITWISE_EAGER)
    if row.numbers()["bitwise_equal_to_eager"]:
        assert not row.broken and row.verdict == "PASS"
    else:
        assert row.verdict == "FAIL" and BITWISE_EAGER in row.broken


# -- on a GPU: the same planted violations, and the real modes' promises where kernels depend on the batch ------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the H200 batch: benchmarks/run.py gpu-tests)")
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_promises_on_cuda(plants, dtype):
    """Planted violations FAIL their rows on CUDA too; `deterministic` and `batch_invariant` keep their promises
    where this torch has them (torch 2.11 lacks `batch_invariant`: the row is then unsupported, never a PASS)."""
    from fusecheck.case import load_target
    from fusecheck.toggles import ToggleUnsupported, resolve

    case = load_target("tests/planted/wide_rows.py:build")
    real = _real_modes()
    m = run_matrix(case, ["test.strict_broken", "test.flaky", "test.batch_dependent", *real], device="cuda",
                   dtype=dtype)
    rows = {r.name: r for r in m.rows}
    for name, promise in [("test.strict_broken", BITWISE_EAGER), ("test.flaky", RUN_TO_RUN),
                          ("test.batch_dependent", BATCH_INVARIANT)]:
        assert rows[name].verdict == "FAIL" and promise in rows[name].broken, (name, rows[name].broken)
    for name in real:
        assert rows[name].verdict == "PASS" and not rows[name].broken and not rows[name].unverified, \
            (name, rows[name].broken, rows[name].unverified)
    print(f"[cuda {dtype}] real modes verified: {real}; table:\n{m.table()}")
