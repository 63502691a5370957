"""fusecheck bisect: each planted culprit is named exactly, two together are both found, a benign
bit-changing fusion is not blamed, a nondeterministic compiler is reported, numbering is deterministic,
the budget covers every compile, and gates leave Inductor's tables as they found them."""
import json

import pytest
import torch

from fusecheck.bisect import bisect, run_trial
from fusecheck.check import CheckOptions
from fusecheck.bisect.gates import Plan
from fusecheck.case import Case
from tests.planted import (custom_pre_pass, decomposition, fusion, inlining, layer_norm, lowering, nondeterministic,
                           pattern_pass, targets)

BUDGET = 30


def _case(builder, name):
    torch.manual_seed(0)
    model, x = builder()
    return Case(model, (x,), name)


def _bisect(plants, builder, name, **kw):
    import contextlib
    with contextlib.ExitStack() as stack:
        for p in plants:
            stack.enter_context(p.planted())
        return bisect(_case(builder, name), CheckOptions(**kw), max_compiles=BUDGET)


@pytest.fixture(scope="module")
def pattern_result():
    return _bisect([pattern_pass], targets.sum_norm, "sum_norm")


@pytest.fixture(scope="module")
def decomposition_result():
    return _bisect([decomposition], targets.standardize, "standardize")


@pytest.fixture(scope="module")
def fusion_result():
    return _bisect([fusion], targets.center, "center")


@pytest.fixture(scope="module")
def inlining_result():
    return _bisect([inlining], targets.exp_mix, "exp_mix")


def _only_culprit(result):
    assert result.status == "culprits" and result.exit_code == 1, result.log
    assert len(result.culprits) == 1, [c.decision.name for c in result.culprits]
    c = result.culprits[0]
    assert not c.partial and c.without_it["passed"] and not c.with_it["passed"]
    assert result.compiles <= BUDGET
    return c


def test_pattern_pass_culprit_named(pattern_result):
    c = _only_culprit(pattern_result)
    assert c.decision.kind == "pattern"
    assert "tests.planted.pattern_pass.lossy_sum_rewrite" in c.decision.name
    assert "planted_lossy_sum" in c.decision.name   # the pass it ran in


def test_decomposition_culprit_named(decomposition_result):
    c = _only_culprit(decomposition_result)
    assert c.decision.kind == "decomposition"
    assert "aten.var_mean.correction" in c.decision.name and "naive_var_mean" in c.decision.name
    assert c.decision.fx_nodes == ["var_mean"] and c.kernels   # the model's node and where it ended up


def test_fusion_culprit_named_with_nodes_and_kernel(fusion_result):
    c = _only_culprit(fusion_result)
    assert c.decision.kind == "fusion"
    assert {"mean", "sub"} <= set(c.decision.fx_nodes)
    assert c.kernels, "the fused FX nodes should be traced to their kernel"
    # per-kernel attribution names the same kernel as worse than eager, on its own
    worse = {r.kernel for r in fusion_result.kernels if r.worse}
    assert set(c.kernels) & worse
    assert any("kernel outputs judged alone (1 compiles)" in line for line in fusion_result.log)  # one, not per kernel


def test_inlining_culprit_named(inlining_result):
    c = _only_culprit(inlining_result)
    assert c.decision.kind == "inlining"
    assert c.decision.fx_nodes[0] == "exp" and "exp" in c.decision.ops[0]
    assert any(r.worse for r in inlining_result.kernels)


def test_lowering_culprit_named():
    c = _only_culprit(_bisect([lowering], targets.exp_mix, "exp_mix"))
    assert c.decision.kind == "lowering" and c.decision.fx_nodes == ["exp"] and "aten.exp" in c.decision.name


def test_attribution_quiet_on_graph_level_bug(decomposition_result):
    """The decomposed graph is what the kernel implements faithfully: no kernel is blamed for it."""
    assert decomposition_result.kernels and not any(r.worse for r in decomposition_result.kernels)


def test_two_culprits_both_found():
    result = _bisect([decomposition, inlining], targets.standardize_exp, "standardize_exp")
    assert result.status == "culprits", result.log
    kinds = [c.decision.kind for c in result.culprits]
    assert sorted(kinds) == ["decomposition", "inlining"], [c.decision.name for c in result.culprits]
    first, second = result.culprits
    assert first.partial and not second.partial            # one alone only partly fixes it
    assert first.without_it["severity"] < first.with_it["severity"]
    assert second.without_it["passed"]


def test_benign_bit_changes_not_blamed():
    """bf16: compiled differs from eager in many bits (fp32 intermediates) but is not worse: no culprit."""
    case = _case(targets.benign, "benign")
    result = bisect(case, CheckOptions(dtype="bf16"), max_compiles=BUDGET)
    assert result.status == "pass" and result.exit_code == 0 and not result.culprits
    rows = result.baseline["rows"]
    assert any(r["code"] != "bitwise_equal" for r in rows.values()), "the case must change bits to mean anything"
    assert result.compiles == 1


def test_nondeterministic_reported_not_bisected():
    result = _bisect([nondeterministic], targets.exp_mix, "exp_mix")
    assert result.status == "nondeterministic" and result.exit_code == 3
    assert result.compiles == 1 and not result.culprits


def test_decision_numbering_is_deterministic():
    case = _case(targets.center, "center")
    a = run_trial(case, CheckOptions(), {})
    b = run_trial(case, CheckOptions(), {})
    keys = lambda t: {k: [d.key for d in v] for k, v in t.decisions.items()}  # noqa: E731
    assert keys(a) == keys(b) and keys(a)["fusion"]
    # allow_first(0) refuses every fusion: none is allowed, and the count of seen decisions is the same
    c = run_trial(case, CheckOptions(), {"fusion": Plan(0)})
    assert c.decisions["fusion"] and not any(d.allowed for d in c.decisions["fusion"])


def test_cli_passing_target_and_json(tmp_path):
    from fusecheck.cli.main import main
    out = tmp_path / "b.json"
    code = main(["bisect", "tests/planted/targets.py:benign", "--dtype", "bf16", "--json", str(out),
                 "--max-compiles", "3"])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["status"] == "pass" and data["compiles"] == 1


def test_a_target_with_error_rows_is_not_bisected(tmp_path):
    """`check` says exit 2 (an output cannot be judged): nothing to bisect, and the JSON stays strict."""
    from fusecheck.cli.main import main
    out = tmp_path / "b.json"
    assert main(["bisect", "tests/planted/cases.py:empty_output", "--json", str(out), "--max-compiles", "3"]) == 2
    data = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert data["status"] == "cannot_judge" and data["compiles"] == 1


def test_cli_bad_usage():
    from fusecheck.cli.main import main
    assert main(["bisect", "tests/planted/targets.py:benign", "--kinds", "nonsense"]) == 2


def _inductor_tables():
    """Identity snapshot of what the decomposition gate touches: tables, registries and patched functions."""
    from torch._inductor import compile_fx, decomposition as idec, graph, lowering
    ids = lambda d: {str(k): id(v) for k, v in d.items()}  # noqa: E731
    return {"lowerings": ids(lowering.lowerings), "fallbacks": {str(o) for o in lowering.fallbacks},
            "realized": {str(o) for o in lowering.needs_realized_inputs}, "decomps": ids(idec.decompositions),
            "lowering.decompositions": ids(getattr(lowering, "decompositions", {})),
            "select": compile_fx.select_decomp_table, "make_fallback": graph.make_fallback}


def test_decomposition_of_unlowered_op_named_and_tables_restored():
    """native_layer_norm has no Inductor lowering: its decomposition is still a decision (refused, it is an
    aten fallback), and the fallbacks registered meanwhile are gone afterwards."""
    with layer_norm.planted():
        before = _inductor_tables()
        result = bisect(_case(targets.layer_norm, "layer_norm"), CheckOptions(), max_compiles=BUDGET,
                        attribution=False)
        assert _inductor_tables() == before
    c = _only_culprit(result)
    assert c.decision.kind == "decomposition"
    assert "aten.native_layer_norm.default" in c.decision.name and "naive_layer_norm" in c.decision.name


def test_custom_pre_pass_named_per_graph_and_noop_decomps_not_decisions():
    """A user's pass in the slot the cache salt wraps is named as itself, once per graph (graph break +
    backward: 4 graphs), never as the salt wrapper; detach/alias-style no-op decompositions are not decisions."""
    with custom_pre_pass.planted():
        t = run_trial(_case(targets.break_mm, "break_mm"), CheckOptions(train=True), {})
    assert not t.passed
    names = [d.name for d in t.decisions["pass"]]
    assert not [n for n in names if "Salt" in n]
    mine = [n for n in names if "tests.planted.custom_pre_pass.LossyMM" in n]
    assert len(mine) == len(set(mine)) >= 4 and all("(graph " in n for n in mine)
    decomps = " ".join(d.name for d in t.decisions["decomposition"])
    assert decomps and not any(w in decomps for w in ("detach", "alias", "nop_decomposition"))


def test_budget_counts_attribution_and_keeps_a_lone_culprit(monkeypatch):
    """--max-compiles 4: baseline, lowering off (passes: code generation is at fault), inlining off (fails),
    fusion (one decision) off passes. That decision is the culprit (its switch-off is its confirmation),
    and per-kernel attribution gets no uncounted compile."""
    from torch._inductor.graph import GraphLowering
    lowered = []
    init = GraphLowering.__init__
    monkeypatch.setattr(GraphLowering, "__init__", lambda self, *a, **k: (lowered.append(1), init(self, *a, **k))[1])
    with fusion.planted():
        result = bisect(_case(targets.center, "center"), CheckOptions(), max_compiles=4)
    assert result.status == "culprits" and result.compiles == 4 and len(lowered) <= 4, result.log
    assert result.culprits[0].decision.kind == "fusion" and not result.culprits[0].partial


def test_all_passing_families_probed_and_lone_fix_preferred(monkeypatch):
    """Two families' switch-offs pass; the first (decomposition) has no decision that alone fixes it, the
    later one (pass) does: the pass is named and the decomposition family reported as an alternative."""
    from types import SimpleNamespace

    from fusecheck.bisect import search
    from fusecheck.bisect.gates import DecisionLog

    class FakeTrial(SimpleNamespace):
        def summary(self):
            return {"passed": self.passed, "severity": self.severity}

    def fake_run_trial(case, opts, plans, kinds=None, capture=False):
        log = DecisionLog(plans)
        ok = {k: log.decide(kind, k, f"{kind} {k}") for kind, k in
              (("decomposition", "d0"), ("decomposition", "d1"), ("pass", "p"))}
        # the pass fires only on decomposed graphs, and only in Inductor (not under aot_eager_decomp_partition)
        bad = opts.backend == "inductor" and ok["p"] and (ok["d0"] or ok["d1"])
        if bad:
            log.decisions["pass"][-1].fx_nodes = ["sum"]   # what it rewrote
        report = SimpleNamespace(passed=not bad, exit_code=1 if bad else 0, compiled_repeatable=True, census=None)
        return FakeTrial(passed=not bad, severity=10.0 if bad else 0.5, error=None, report=report,
                         decisions=dict(log.decisions), unavailable={}, captured=None)

    monkeypatch.setattr(search, "run_trial", fake_run_trial)
    result = bisect(None, CheckOptions(), max_compiles=BUDGET, attribution=False)
    assert result.status == "culprits", result.log
    assert [c.decision.name for c in result.culprits] == ["pass p"]
    # switching decompositions off removes the pass's rewrite: reported as what enables it, not an alternative
    assert any("decomposition" in e and "makes no rewrite" in e for e in result.culprits[0].enabled_by)


def test_split_graph_side_falls_back_to_code_generation(monkeypatch):
    """Scripted probes: with lowering off the target still fails (so the split points at graph rewrites), but
    no graph rewrite family fixes it and an inlining does: the code generation families are probed after
    all and the inlining is named, rather than the search giving up."""
    from types import SimpleNamespace

    from fusecheck.bisect import search
    from fusecheck.bisect.gates import DecisionLog

    class FakeTrial(SimpleNamespace):
        def summary(self):
            return {"passed": self.passed, "severity": self.severity, "rows": {"out": self.severity}}

    def fake_run_trial(case, opts, plans, kinds=None, capture=False):
        log = DecisionLog(plans)
        ok = {k: log.decide(kind, k, f"{kind} {k}") for kind, k in
              (("pass", "p"), ("lowering", "l"), ("inlining", "i"))}
        bad = not ok["l"] or ok["i"]   # lowering off fails for a reason no gate controls; inlining off fixes it
        report = SimpleNamespace(passed=not bad, exit_code=1 if bad else 0, compiled_repeatable=True, census=None)
        return FakeTrial(passed=not bad, severity=10.0 if bad else 0.5, error=None, report=report,
                         decisions=dict(log.decisions), unavailable={}, captured=None)

    monkeypatch.setattr(search, "run_trial", fake_run_trial)
    result = bisect(None, CheckOptions(), max_compiles=BUDGET, attribution=False)
    assert [c.decision.name for c in result.culprits] == ["inlining i"], result.log
    assert any("a graph rewrite introduces" in line for line in result.log)
