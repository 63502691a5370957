"""Fusion decisions keyed by FX origins: a refused pair stays refused after the scheduler merges nodes
under new names (issue 9, item 2: `op9 + op10` refused, `op6_op7_op8_op9 + op10_op11` fused anyway)."""
import torch

from fusecheck.bisect import bisect
from fusecheck.check import CheckOptions
from fusecheck.bisect.gates.fusion import held_off, pair_key, parse_key
from fusecheck.case import Case
from tests.planted import chain_targets, fusion_pair


def test_held_off_pair_covers_merged_nodes():
    key = "g0:" + pair_key(["exp", "sub"], ["sum_1"])
    assert parse_key(key) == (0, frozenset({"exp", "sub"}), frozenset({"sum_1"}))
    blocked = frozenset({key})
    assert held_off(blocked, 0, {"mean", "exp", "sub"}, {"sum_1", "div"})       # merged on both sides
    assert held_off(blocked, 0, {"sum_1"}, {"exp", "sub"})                      # either order
    assert not held_off(blocked, 0, {"exp", "sub"}, {"div"})                    # the pair's other fusions
    assert not held_off(blocked, 1, {"exp", "sub"}, {"sum_1"})                  # another graph
    assert not held_off(frozenset({"g0:op1+op2"}), 0, {"op1"}, {"op2"})         # not an origin key


def test_fusion_pair_inside_chain_stays_refused():
    """mean -> exp -> sum -> div fuse into one kernel; only exp + sum together is wrong. The bisector names
    that pair, and with it held off the scheduler's merged re-asks (op0_op1 + op2_op3) are refused too."""
    torch.manual_seed(0)
    model, x = chain_targets.exp_sum_chain()
    with fusion_pair.planted():
        result = bisect(Case(model, (x,), "exp_sum_chain"), CheckOptions(), kinds=["fusion"], max_compiles=12,
                        attribution=False)
    assert result.status == "culprits" and len(result.culprits) == 1, result.log
    c = result.culprits[0]
    assert not c.partial and c.without_it["passed"], result.log
    left, right = c.decision.key.split(":", 1)[1].split("|")
    sides = {frozenset(left.split(",")), frozenset(right.split(","))}
    assert any("exp" in s and "sum_1" not in s for s in sides) and frozenset({"sum_1"}) in sides, c.decision.key
