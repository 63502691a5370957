"""`fusecheck toggles`: list the toggles, what each does, how it is applied, and whether torch supports it."""
from __future__ import annotations

import argparse
import json
import textwrap

import torch
from tabulate import tabulate

from fusecheck.cli.report_paths import write_reports

from .catalog import TOGGLES
from .errors import ToggleUnsupported


def support(name: str) -> str:
    try:
        TOGGLES[name].check()
    except ToggleUnsupported as exc:
        return f"no: {exc}"
    return "yes"


def run(args: argparse.Namespace) -> int:
    """The list within 120 columns (without --how): support is yes/no, each "no" explained under the table."""
    rows, missing = [], []
    for t in TOGGLES.values():
        supported = support(t.name)
        if supported != "yes":
            missing.append(f"{t.name}: {supported.removeprefix('no: ')}")
        row = [t.name, t.doc] + ([t.how] if args.how else []) + [", ".join(t.promises) or "-",
                                                                   "yes" if supported == "yes" else "no"]
        rows.append(row)
    headers = (["toggle", "what it does"] + (["how"] if args.how else [])
               + ["promises\n(+ not worse)", "supported"])

    def write() -> None:
        with open(args.json_path, "w") as f:
            json.dump([{**t.to_dict(), "supported": support(t.name)} for t in TOGGLES.values()], f, indent=2)
    write_reports([("--json", args.json_path, write)])
    print(f"toggles for torch {torch.__version__} (`fusecheck matrix` checks each promise on the toggle's row)")
    print(tabulate(rows, headers=headers, maxcolwidths=[None, 40] + ([40] if args.how else []) + [15, 9]))
    for line in missing:
        print(textwrap.fill(f"not supported: {line}", 120, subsequent_indent="  "))
    return 0
