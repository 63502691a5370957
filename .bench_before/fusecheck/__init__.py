"""fusecheck: prove that fusion did not make numerics worse than eager, against a high-precision golden."""
__version__ = "0.1.0"
