"""fusecheck: prove that fusion did not make numerics worse than eager, against a high-precision golden."""
__version__ = "0.1.0"


def __getattr__(name: str):
    """`from fusecheck import Case`, the name a target's builder returns (loaded on first use: importing the
    package stays free of torch)."""
    if name == "Case":
        from fusecheck.case import Case
        return Case
    raise AttributeError(f"module 'fusecheck' has no attribute {name!r}")
