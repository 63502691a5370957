"""`fusecheck train`: N optimizer steps of eager, compiled and an fp64 shadow, the drift judged against eager's own.

A one-step check asks "is this forward+backward not worse than eager"; users compile to *train*, and what they
report are trajectories (a compiled artifact that keeps stale weights, an update rounded where eager kept fp32
master weights). This package runs the trajectories side by side from the same weights on one data stream and
judges, step by step, each loss and parameter with the check's own comparison core, eager's error replaced by
the worst of eager and K randomised-rounding eager trajectories (its run-to-run band). docs/train.md.

Nothing is imported here: `fusecheck train -h` must not load torch.
"""
