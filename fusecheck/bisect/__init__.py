"""Golden-aware bisection: which compiler decision makes compiled worse than eager (`fusecheck bisect`)."""
from fusecheck.bisect.objective import run_trial
from fusecheck.bisect.search import BisectResult, Culprit, bisect

__all__ = ["bisect", "BisectResult", "Culprit", "run_trial"]
