"""The interaction search: when all toggles together are worse than each alone, leave-one-out rows and then
pairs name the smallest set that makes it worse. Stub rows test the search's logic without a compile;
one end-to-end matrix plants two test toggles that are harmless alone and worse together."""
from __future__ import annotations

import contextlib
import json

import pytest
import torch

from fusecheck.matrix import MatrixRow, run_matrix, worse
from fusecheck.matrix.interactions import WORSE_FACTOR, search
from fusecheck.matrix.rows import LEAVE_ONE_OUT, SUBSET
from fusecheck.toggles import TOGGLES, Toggle


class Row(MatrixRow):
    """A row with a fixed verdict and error ratio (what the search reads)."""

    def __init__(self, toggles, verdict="PASS", ratio=1.0, name=None, kind="single"):
        super().__init__(name or "+".join(toggles), tuple(toggles), reference="baseline", kind=kind)
        self._verdict, self._ratio = verdict, ratio

    @property
    def verdict(self):
        return self._verdict

    def error_ratio(self):
        return self._ratio


def world(bad):
    """run(toggles, name, kind) for a world where a set is worse (FAIL, ratio 50) iff bad(set)."""
    calls = []

    def run(ts, name, kind):
        calls.append((frozenset(ts), kind))
        return Row(ts, *(("FAIL", 50.0) if bad(frozenset(ts)) else ("PASS", 1.0)), name=name, kind=kind)

    return run, calls


def _search(toggles, bad, **kw):
    run, calls = world(bad)
    singles = [Row((t,)) for t in toggles]
    together = Row(toggles, *(("FAIL", 16.0) if bad(frozenset(toggles)) else ("PASS", 1.0)), name="all", kind="all")
    return search(together, singles, run, **kw), calls


def test_worse_is_a_worse_verdict_or_a_much_larger_ratio():
    assert worse(Row("a", "FAIL", 1.1), Row("b", "PASS", 1.0))
    assert not worse(Row("a", "PASS", 1.9), Row("b", "PASS", 1.0))  # within the verdict's own factor
    assert worse(Row("a", "PASS", 0.9), Row("b", "PASS", 0.9 / (WORSE_FACTOR + 0.1)))
    assert not worse(Row("a", "ERROR", 100.0), Row("b", "PASS", 1.0))  # an error is not a number


def test_no_search_when_the_all_row_is_not_worse_than_every_single_row():
    result, calls = _search(("a", "b", "c"), lambda s: False)
    assert result is None and calls == []
    run, calls = world(lambda s: True)
    singles = [Row(("a",)), Row(("b",), "FAIL", 20.0)]  # b alone is already as bad
    assert search(Row(("a", "b"), "FAIL", 16.0, "all", "all"), singles, run) is None and calls == []


def test_a_pair_of_two_needs_no_more_rows():
    result, calls = _search(("a", "b"), lambda s: {"a", "b"} <= s)
    assert result.found == ("a", "b") and calls == [] and result.shown_by.name == "all"


def test_leave_one_out_then_the_pair():
    result, calls = _search(("a", "b", "c", "d"), lambda s: {"b", "c"} <= s)
    assert result.found == ("b", "c")
    assert [k for _, k in calls] == [LEAVE_ONE_OUT] * 4 + [SUBSET]
    assert "the smallest set that makes it worse: b + c (FAIL, ratio 50)" in result.describe()
    assert result.to_dict()["toggles"] == ["b", "c"] and len(result.to_dict()["rows_added"]) == 5


def test_not_monotone_a_third_toggle_undoing_the_pair():
    """The issue's shape: nr + emu is worse, nr + emu + decomp is fine again, all together is worse."""
    names = ("nr", "emu", "decomp", "x")

    def bad(s):
        return {"nr", "emu"} <= s and ("decomp" not in s or "x" in s)

    result, _ = _search(names, bad)
    assert result.found == ("nr", "emu")


def test_a_three_way_interaction_is_named_whole():
    result, calls = _search(("a", "b", "c", "d"), lambda s: {"a", "b", "c"} <= s)
    # 3 pairs are run; a+b+c is the leave-one-out row without d, already run
    assert result.found == ("a", "b", "c") and [k for _, k in calls].count(SUBSET) == 3


def test_the_search_is_bounded():
    result, calls = _search(tuple("abcdef"), lambda s: s == frozenset("abcdef"), max_rows=3)
    assert result.found is None and result.budget_spent and len(calls) == 3
    assert "budget ran out" in result.describe()


# -- end to end: two planted toggles, harmless alone, worse together ------------------------------------
_ON: set[str] = set()


def _together_pass():
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class Together(CustomGraphPass):
        """When both planted toggles are on, the first tanh's result is scaled by 1 + 2^-6."""

        def __call__(self, graph):
            if not {"test.left", "test.right"} <= _ON:
                return
            node = next(n for n in graph.nodes if n.target is torch.ops.aten.tanh.default)
            with graph.inserting_after(node):
                new = graph.call_function(torch.ops.aten.mul.Tensor, (node, 1.015625))
            node.replace_all_uses_with(new, delete_user_cb=lambda u: u is not new)
            new.meta.update(node.meta)

        def uuid(self):
            return ("fusecheck-test-together", tuple(sorted(_ON)))

    return Together()


def _half(name):
    @contextlib.contextmanager
    def on():
        _ON.add(name)
        try:
            yield
        finally:
            _ON.discard(name)

    def apply(stack):
        from torch._inductor import config

        stack.enter_context(on())
        stack.enter_context(config.patch(post_grad_custom_post_pass=_together_pass()))

    return Toggle(name, "planted: half of an interaction", "post_grad_custom_post_pass", apply, lambda gm: True)


TARGET = "tests/planted/tiny_tanh.py:build"


@pytest.mark.slow
def test_the_matrix_names_two_toggles_harmless_alone_and_worse_together(tmp_path, monkeypatch):
    from fusecheck.case import load_target

    for name in ("test.left", "test.right"):
        monkeypatch.setitem(TOGGLES, name, _half(name))
    m = run_matrix(load_target(TARGET), ["test.left", "test.right"], all_together=True)
    rows = {r.name: r for r in m.rows}
    assert rows["test.left"].verdict == rows["test.right"].verdict == "PASS"
    assert rows["all"].verdict == "FAIL" and m.interaction.found == ("test.left", "test.right")
    assert "the smallest set that makes it worse: test.left + test.right" in m.table()
    data = json.loads(json.dumps(m.to_dict(), default=str))
    assert data["interaction"]["toggles"] == ["test.left", "test.right"] and data["interaction"]["rows_added"] == []


@pytest.mark.slow
def test_a_matrix_without_an_interaction_runs_no_search_rows(tmp_path, monkeypatch):
    """The default cost: the all row is not worse than each single row, so no row is added."""
    from fusecheck.case import load_target

    monkeypatch.setitem(TOGGLES, "test.left", _half("test.left"))
    m = run_matrix(load_target(TARGET), ["test.left", "fusion.pointwise"], all_together=True)
    assert m.interaction is None and [r.name for r in m.rows] == ["baseline", "test.left", "fusion.pointwise", "all"]
    assert "interaction:" not in m.table()
