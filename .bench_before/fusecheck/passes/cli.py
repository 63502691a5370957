"""`fusecheck toggles`: list the toggles, what each does, how it is applied, and whether torch supports it."""
from __future__ import annotations

import argparse
import json

import torch
from tabulate import tabulate

from .catalog import TOGGLES
from .errors import ToggleUnsupported


def support(name: str) -> str:
    try:
        TOGGLES[name].check()
    except ToggleUnsupported as exc:
        return f"no: {exc}"
    return "yes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--how", action="store_true", help="also show how each toggle is applied to Inductor")
    p.add_argument("--json", dest="json_path", default=None, help="write the list as JSON")


def run(args: argparse.Namespace) -> int:
    rows = []
    for t in TOGGLES.values():
        row = [t.name, t.doc] + ([t.how] if args.how else []) + [support(t.name)]
        rows.append(row)
    headers = ["toggle", "what it does"] + (["how"] if args.how else []) + [f"torch {torch.__version__}"]
    print(tabulate(rows, headers=headers, maxcolwidths=[None, 60] + ([50] if args.how else []) + [30]))
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump([{**t.to_dict(), "supported": support(t.name)} for t in TOGGLES.values()], f, indent=2)
    return 0
