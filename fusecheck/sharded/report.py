"""Rank 0's report of a sharded check: every rank's rows in one table (named `rankR/...`), the agreed verdict,
and each rank's peak memory."""
from __future__ import annotations

import argparse

from fusecheck.case import Case
from fusecheck.policy import Policy


def _gib(n: int) -> str:
    return f"{n / 2 ** 30:.2f} GiB"


def peak_lines(results: list[dict]) -> list[str]:
    lines = []
    for res in results:
        peaks = {p: e.get("device_peak_bytes", e.get("host_peak_rss_bytes", e.get("host_peak_rss_bytes_since_start")))
                 for p, e in res["memory"].items()}
        where = "device" if any("device_peak_bytes" in e for e in res["memory"].values()) else "host RSS"
        worst = max((v for v in peaks.values() if v is not None), default=0)
        phases = ", ".join(f"{p} {_gib(v)}" for p, v in peaks.items() if v is not None)
        lines.append(f"rank {res['rank']}: peak {where} memory {_gib(worst)} ({phases}); its parameter shard "
                     f"{_gib(res['shard_bytes'])}")
    return lines


def build_report(case: Case, args: argparse.Namespace, policy: Policy, results: list[dict], graphs: list = ()):
    from fusecheck.check import CheckReport
    rows = []
    for res in results:
        for row in res["rows"]:
            row.name = f"rank{res['rank']}/{row.name}"
            rows.append(row)
    blocks = []
    for res in results:
        for b in res["blocks"]:
            b.name = f"rank{res['rank']}/{b.name}"
            blocks.append(b)
    first = results[0]
    how = ("with DTensor tensor parallelism inside each block (the target's plan; the fp64 golden upcasts "
           "each rank's shard)" if first["layout"] == "tp" else "with FSDP2, one group per block")
    notes = [f"sharded over {len(results)} ranks {how}; blocks compiled one by one; "
             "each rank judges its own outputs and its own gradient shards"
             + ("; built on the meta device, each rank initialised its shard" if first["meta"] else "")]
    notes += [n for res in results for n in (f"rank {res['rank']}: {x}" for x in res["notes"])]
    notes += peak_lines(results)
    dtype = args.dtype or "the model's own"
    report = CheckReport(case.name, args.backend, str(dtype), args.device, args.train, args.seed, policy, rows,
                         list(graphs), notes, golden_mode=f"streamed per rank ({first['plan']})", regional=True,
                         seconds=first["seconds"], memory=first["memory"], blocks=blocks)
    return report


def report_ranks(case: Case, args: argparse.Namespace, policy: Policy, results: list[dict], agreed: int,
                 graphs: list = ()) -> None:
    from fusecheck.report.json_report import write_json
    from fusecheck.report.table import format_report
    report = build_report(case, args, policy, results, graphs)
    print(format_report(report, verbose=args.verbose))
    failing = sorted({int(r.name.split("/")[0][4:]) for r in report.rows if not r.passed})
    if failing:
        print(f"failing on rank(s): {', '.join(map(str, failing))}")
    print(f"agreed by all {len(results)} ranks: exit {agreed}", flush=True)
    if args.json_path:
        data = report.to_dict()
        data.update(exit_code=agreed, ranks=len(results), failing_ranks=failing,
                    peak_memory=[{"rank": r["rank"], **r["memory"]} for r in results])
        write_json(data, args.json_path)
