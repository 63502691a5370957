"""`fusecheck toggles`: list the toggles, what each does, how it is applied, and whether torch supports it."""
from __future__ import annotations

import argparse
import json

import torch
from tabulate import tabulate

from fusecheck.outputs import write_reports

from .catalog import TOGGLES
from .errors import ToggleUnsupported


def support(name: str) -> str:
    try:
        TOGGLES[name].check()
    except ToggleUnsupported as exc:
        return f"no: {exc}"
    return "yes"


def run(args: argparse.Namespace) -> int:
    rows = []
    for t in TOGGLES.values():
        row = [t.name, t.doc] + ([t.how] if args.how else []) + [", ".join(t.promises) or "-", support(t.name)]
        rows.append(row)
    headers = (["toggle", "what it does"] + (["how"] if args.how else [])
               + ["promises\n(+ not worse)", f"torch {torch.__version__}"])
    def write() -> None:
        with open(args.json_path, "w") as f:
            json.dump([{**t.to_dict(), "supported": support(t.name)} for t in TOGGLES.values()], f, indent=2)
    write_reports([("--json", args.json_path, write)])
    print(tabulate(rows, headers=headers, maxcolwidths=[None, 50] + ([40] if args.how else []) + [15, 30]))
    return 0
