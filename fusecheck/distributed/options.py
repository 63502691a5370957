"""The vocabulary `fusecheck dist` shares between its arguments (no torch, fusecheck/cli/dist.py) and its
checker (fusecheck/distributed/cli.py), so that neither imports the other."""

from fusecheck import dtypes

# fusecheck.distributed.task.LAYERS (a test holds the two equal): importing it imports torch
LAYERS = ("comm", "compute", "whole")
DTYPES = {name: dtypes.LONG[short] for name, short in dtypes.ALIASES.items()}  # any spelling -> torch's name
# runs per shape: a race fails some runs or changes layer 1's bits between runs, a layout bug fails all of them
# the same way. The planted races measured (docs/benchmarks.md; also 14-40 of 40 runs on other machines)
# fail at least 35 % of runs: with 10 runs a race at 35 % looks constant with probability
# 0.35**10 + 0.65**10 < 1.4 %, and 10 repeats of the default small shapes take about a second at 2 ranks.
DEFAULT_REPEAT = 10
