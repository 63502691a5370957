"""The streamed golden against the whole fp64 copy on the same model: both goldens, the same rows, eager's
error against each golden equal to fp64 rounding (and how many rows are not equal to the bit) (a differential test at real widths, where pieces outside the
blocks are streamed too; tests/golden/test_streamed_family.py does the same on a generated family).

    python benchmarks/streamed_vs_whole.py [--targets FILE.py:NAME,...] [--dtype bf16] [--train]

Default targets: models/real_width.py (GPT-2 small, t5-small, BERT-base widths with a few layers, issue 27's
mixed-precision residual at width 2048). Backend aot_eager: the goldens are under test, not a compiler.
Exit 1 when any row differs.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fusecheck.case import load_target  # noqa: E402
from fusecheck.check import run_check  # noqa: E402
from fusecheck.errors import TargetError  # noqa: E402

TARGETS = ",".join(f"models/real_width.py:{n}" for n in
                   ("build_gpt2_small", "build_t5_small", "build_bert_base", "build_mixed_residual"))


# "the same golden to fp64 rounding" (issue 27): eager's error against either golden within this relative
# difference. The two goldens sum some gradients in another order (an encoder-decoder's encoder output feeds
# every decoder block, and its gradient is summed block by block when streamed): ~1e-14 apart, not to the bit
FP64_ROUNDING = 1e-12


def differences(whole, streamed) -> tuple[list[str], int]:
    """(rows whose names or verdict differ between the two goldens, or whose eager-vs-golden RMSE differs beyond
    fp64 rounding; how many rows' RMSEs differ at all)."""
    if [r.name for r in whole.rows] != [r.name for r in streamed.rows]:
        return ["the two goldens gave different rows"], 0
    out, rounding = [], 0
    for a, b in zip(whole.rows, streamed.rows):
        ea, eb = a.reference_vs_golden, b.reference_vs_golden
        moved = ea is not None and eb is not None and ea.rmse != eb.rmse
        rounding += moved
        if (ea is None) != (eb is None) or a.verdict.status != b.verdict.status or (
                moved and abs(ea.rmse - eb.rmse) > FP64_ROUNDING * max(abs(ea.rmse), abs(eb.rmse))):
            out.append(f"{a.name}: eager rmse {ea and ea.rmse} vs {eb and eb.rmse}, "
                       f"{a.verdict.status.value} vs {b.verdict.status.value}")
    return out, rounding


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default=TARGETS)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--train", action="store_true")
    a = p.parse_args()
    bad = 0
    print("| target | dtype | mode | whole: status, s | streamed: golden, status, s | rows | rows that differ | "
          "rows not equal to the bit (within fp64 rounding) |")
    print("|---|---|---|---|---|---|---|---|")
    for target in a.targets.split(","):
        runs, secs = {}, {}
        try:
            for golden in ("whole", "streamed"):
                t = time.perf_counter()
                runs[golden] = run_check(load_target(target), backend="aot_eager", dtype=a.dtype, train=a.train,
                                         golden=golden)
                secs[golden] = time.perf_counter() - t
        except TargetError as e:  # nothing to stream (no blocks): a row saying so, and the next target
            print(f"| {target.split(':')[-1]} | {a.dtype} | {'train' if a.train else 'fwd'} | "
                  f"{runs['whole'].status if 'whole' in runs else '-'} | not streamed: {str(e)[:90]} | - | - | - |")
            continue
        diff, rounding = differences(runs["whole"], runs["streamed"])
        bad += bool(diff)
        s = runs["streamed"]
        print(f"| {target.split(':')[-1]} | {a.dtype} | {'train' if a.train else 'fwd'} | "
              f"{runs['whole'].status}, {secs['whole']:.1f} | {s.golden_mode.split(' (')[0]}, {s.status}, "
              f"{secs['streamed']:.1f} | {len(s.rows)} | {len(diff)} | {rounding} |", flush=True)
        for line in diff[:5]:
            print(f"    {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
