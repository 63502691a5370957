"""Introducing vs enabling (issue 9, item 1): a custom post-grad pass that only matches *decomposed* softmax.
Switching off decompositions and switching off passes both fix the verdict; the bisector names the pass
(decided from evidence: with decompositions off the pass rewrites nothing) and reports the `_softmax`
decomposition as what enables it, as a chain."""
import torch

from fusecheck.bisect import TrialOptions, bisect
from fusecheck.case import Case
from tests.planted import chain_targets, softmax_pass


def test_pass_matching_decomposed_softmax_is_the_culprit_decomposition_the_enabler():
    torch.manual_seed(0)
    model, x = chain_targets.scaled_softmax()
    # decomposition before pass on purpose: the old fixed family order searched decompositions first
    with softmax_pass.planted():
        result = bisect(Case(model, (x,), "scaled_softmax"), TrialOptions(kinds=["decomposition", "pass"]),
                        max_compiles=14, attribution=False)
    assert result.status == "culprits" and len(result.culprits) == 1, result.log
    c = result.culprits[0]
    assert c.decision.kind == "pass" and "LossySoftmaxSum" in c.decision.name, result.log
    assert not c.partial and c.without_it["passed"]
    assert c.decision.sources == ["aten._softmax.default"]
    assert len(c.enabled_by) == 1 and "aten._softmax.default" in c.enabled_by[0]
    assert "makes no rewrite" in c.enabled_by[0] and c.chain.startswith("pass ")
    assert not c.alternatives
