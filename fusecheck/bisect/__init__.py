"""Golden-aware bisection: which compiler decision makes compiled worse than eager (`fusecheck bisect`)."""
from fusecheck.bisect.objective import run_trial
from fusecheck.bisect.result import BisectResult, Culprit
from fusecheck.bisect.search import bisect

__all__ = ["bisect", "BisectResult", "Culprit", "run_trial"]
