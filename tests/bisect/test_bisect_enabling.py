"""Introducing vs enabling (issue 9, item 1): a custom post-grad pass that only matches *decomposed* softmax.
Switching off decompositions and switching off passes both fix the verdict; the bisector names the pass
(decided from evidence: with decompositions off the pass rewrites nothing) and reports the `_softmax`
decomposition as what enables it, as a chain. On CPU and, where there is one, on a CUDA device (the H200:
`python -m pytest -q tests/bisect/test_bisect_enabling.py -k cuda`)."""
import pytest
import torch

from fusecheck.bisect import bisect
from fusecheck.check import CheckOptions
from fusecheck.case import Case
from tests.planted import chain_targets, softmax_pass

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA")])]


def _bisect(device, kinds, max_compiles):
    torch.manual_seed(0)
    model, x = chain_targets.scaled_softmax()
    with softmax_pass.planted():
        return bisect(Case(model, (x,), "scaled_softmax"), CheckOptions(device=device), kinds=kinds,
                      max_compiles=max_compiles, attribution=False)


def _pass_named_decomposition_enables(result):
    assert result.status == "culprits" and len(result.culprits) == 1, result.log
    c = result.culprits[0]
    assert c.decision.kind == "pass" and "LossySoftmaxSum" in c.decision.name, result.log
    assert not c.partial and c.without_it["passed"]
    assert c.decision.sources == ["aten._softmax.default"]
    assert len(c.enabled_by) == 1 and "aten._softmax.default" in c.enabled_by[0], c.enabled_by
    assert "makes no rewrite" in c.enabled_by[0] and c.chain.startswith("pass ")
    assert not c.alternatives


@pytest.mark.parametrize("device", DEVICES)
def test_pass_matching_decomposed_softmax_is_the_culprit_decomposition_the_enabler(device):
    # decomposition before pass on purpose: the old fixed family order searched decompositions first
    _pass_named_decomposition_enables(_bisect(device, ["decomposition", "pass"], 14))


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_every_family_gated_still_names_the_pass(device):
    """All gates on (as `fusecheck bisect` runs): inlining, fusion and lowering decisions that could hide
    the pass's rounding (on CUDA a refused inlining did) must not be blamed. The graph run op by op
    (lowering off) already fails, so the search stays among graph rewrites, and it costs fewer compiles
    than torch's CompilerBisector (13 on CPU) takes to reach the custom-pass hook slot."""
    result = _bisect(device, None, 13)
    _pass_named_decomposition_enables(result)
    assert result.compiles <= 12, result.log


def test_removal_evidence_ignores_renames_and_counts_prevented_decisions():
    """A switch-off 'removes' a decision only if it prevented it: two nodes fused under other merged names
    are still fused; an inlining of a node the switch-off took out of the graph was not refused; a node
    still lowered but no longer inlined, or two sides no longer joined, were."""
    from types import SimpleNamespace

    from fusecheck.bisect.evidence import removed
    from fusecheck.bisect.gates import Decision

    def trial(**fams):
        return SimpleNamespace(decisions={k: [Decision(k, i, key, key, allowed=ok) for i, (key, ok) in enumerate(v)]
                                          for k, v in fams.items()})

    failing = trial(fusion=[("g0:exp,sub|sum_1", True)], inlining=[("g0:exp", True), ("g0:cvt", True)],
                    lowering=[("g0:exp", True), ("g0:cvt", True), ("g0:sum_1", True)])
    renamed = trial(fusion=[("g0:mean,sub|exp", True), ("g0:exp,mean,sub|sum_1,div", True)],
                    inlining=[("g0:exp", True)], lowering=[("g0:exp", True), ("g0:sum_1", True)])
    assert removed(failing, renamed, "fusion") == set()        # exp and sum_1 still fused, under merged names
    assert removed(failing, renamed, "inlining") == set()      # cvt is gone from the graph: not refused
    apart = trial(fusion=[("g0:mean|exp,sub", True)], inlining=[("g0:exp", False)],
                  lowering=[("g0:exp", True), ("g0:cvt", True), ("g0:sum_1", True)])
    assert removed(failing, apart, "fusion") == {"g0:exp,sub|sum_1"}
    assert removed(failing, apart, "inlining") == {"g0:exp", "g0:cvt"}
