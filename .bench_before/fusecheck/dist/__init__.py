"""`fusecheck dist`: layered validation of fused communication + compute kernels.

spec (DistSpec) -> rank pool runs layers 1-3 on every rank -> compare -> per-rank verdicts -> diagnosis -> report.
"""
from fusecheck.dist.collectives import COLLECTIVES, Collective
from fusecheck.dist.spec import DistSpec, load_spec, seeded_randn
from fusecheck.dist.tiling import chunk_bounds

__all__ = ["DistSpec", "load_spec", "seeded_randn", "COLLECTIVES", "Collective", "chunk_bounds", "ops", "workspace"]

from fusecheck.dist import ops, workspace  # noqa: E402  (kernels use these helpers)
