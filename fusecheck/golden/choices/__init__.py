"""Discrete decisions (topk, sort, argmax, max/min over a dim): near-ties are followed, not failed.

A routing decision turns rounding noise into an O(1) difference: where the golden's two best experts are
closer than the run's own rounding error, compiled may pick the runner-up as legitimately as eager picks
the winner, and compiled's output at that token is then far from a golden that picked the other one.
fusecheck records the choices eager and compiled made, and the fp64 golden a run is judged against takes
that run's choice wherever the two choices are within the policy's `decision_tie` times eager's own error
at the decision's input (a near-tie); elsewhere it keeps its own, so a wrong choice still fails.
"""
