"""`fusecheck dist`: layered validation of fused communication + compute kernels.

spec (DistSpec) -> rank pool runs layers 1-3 on every rank -> compare -> per-rank verdicts -> diagnosis -> report.
"""
from fusecheck.distributed.collectives import COLLECTIVES, Collective
from fusecheck.distributed.spec import DistSpec, load_spec, seeded_randn
from fusecheck.distributed.tiling import chunk_bounds

__all__ = ["DistSpec", "load_spec", "seeded_randn", "COLLECTIVES", "Collective", "chunk_bounds", "ops", "workspace"]

from fusecheck.distributed import ops, workspace  # noqa: E402  (kernels use these helpers)
