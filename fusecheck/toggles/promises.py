"""What a toggle or mode promises, by name. A promise is a claim the matrix checks on that toggle's row
(fusecheck/matrix/promises.py holds the checks): a broken promise fails the row even when the numbers are
"not worse than eager". Torch-free, so that listings and `-h` need no torch.
"""
from __future__ import annotations

NOT_WORSE = "not_worse"
BITWISE_EAGER = "bitwise_eager"
RUN_TO_RUN = "run_to_run"
BATCH_INVARIANT = "batch_invariant"

# name -> what it claims (one line, shown by `fusecheck toggles` and in the matrix legend)
PROMISES: dict[str, str] = {
    NOT_WORSE: "not worse than eager against the fp64 golden (the check's verdict; every toggle promises it)",
    BITWISE_EAGER: "every output and gradient bitwise equal to eager",
    RUN_TO_RUN: "two runs of one compiled build give the same bits",
    BATCH_INVARIANT: "a row's result has the same bits whether it is computed in the batch, a sub-batch or a "
                     "larger batch",
}


def promised(names: tuple[str, ...] | list[str], declared: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The promises of a row with these toggles: not_worse, then each toggle's own, in toggle order, once."""
    out = [NOT_WORSE]
    for name in names:
        for p in declared.get(name, ()):
            if p not in out:
                out.append(p)
    return tuple(out)
