"""benchmarks/streamed_vs_whole.py's comparison: equal goldens give no difference; a row whose eager error
moved by one ulp is counted (fp64 rounding: another summation order), one that moved by more than that, a
verdict that flipped or a missing row is named."""
import importlib.util
from pathlib import Path
from types import SimpleNamespace as NS

import math

from fusecheck.compare import Status

_spec = importlib.util.spec_from_file_location(
    "streamed_vs_whole", Path(__file__).resolve().parents[2] / "benchmarks" / "streamed_vs_whole.py")
svw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(svw)


def _report(*rows):
    return NS(rows=[NS(name=n, reference_vs_golden=None if e is None else NS(rmse=e), verdict=NS(status=s))
                    for n, e, s in rows])


def test_equal_goldens_give_no_difference_and_any_change_is_named():
    base = [("output", 1e-3, Status.PASS), ("grad.w", 2e-4, Status.PASS), ("mask", None, Status.PASS)]
    assert svw.differences(_report(*base), _report(*base)) == ([], 0)
    ulp = [base[0], ("grad.w", math.nextafter(2e-4, 1.0), Status.PASS), base[2]]
    assert svw.differences(_report(*base), _report(*ulp)) == ([], 1)  # within fp64 rounding: counted, not named
    moved = [base[0], ("grad.w", 2e-4 * (1 + 1e-9), Status.PASS), base[2]]
    diff, rounding = svw.differences(_report(*base), _report(*moved))
    assert [d.split(":")[0] for d in diff] == ["grad.w"] and rounding == 1
    flipped = [("output", 1e-3, Status.FAIL), *base[1:]]
    assert [d.split(":")[0] for d in svw.differences(_report(*base), _report(*flipped))[0]] == ["output"]
    assert svw.differences(_report(*base), _report(*base[:2]))[0] == ["the two goldens gave different rows"]
