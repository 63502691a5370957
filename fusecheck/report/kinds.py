"""Model-scale tables: one row per parameter kind, not one per parameter.

Why: an 8B `--train` check has 291 gradients whose names differ only in a block index; a table of 291 rows
cut to `grad.mo…j.weight` is read by nobody. Names equal once every integer path component is `*`
(`grad.model.layers.*.self_attn.q_proj.weight`) are one kind. Above KIND_ROWS rows the table shows each kind
once: its worst row (the one that came closest to its limit: the largest of its checks' margins, a failure
before any pass), named by the kind, with a column saying how many rows it holds, how many fail and which
index was worst; kinds are sorted by that closeness, so the table reads from the row nearest to failing.
Every row stays whole in -v, the JSON and the HTML, and every failing row is still printed with its message
below the table.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Sequence

KIND_ROWS = 40  # a table of more rows groups them by kind

_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")


def kind_of(name: str) -> str:
    """`grad.model.layers.17.mlp.weight` -> `grad.model.layers.*.mlp.weight`."""
    return _INDEX.sub("*", name)


def closeness(row) -> float:
    """How close a row came to its limit: inf for a failure, else its largest margin (> 1 would fail)."""
    if not row.passed:
        return math.inf
    margins = [m for m in (row.verdict.margins or {}).values() if isinstance(m, (int, float)) and math.isfinite(m)]
    return max(margins, default=0.0)


def by_kind(rows: Sequence) -> tuple[list, list[str] | None]:
    """The table's rows and, when grouped, each one's `rows` cell. Up to KIND_ROWS rows: `rows` as they are
    and None. Above: one row per kind (its worst, named by the kind), sorted nearest to the limit first, with
    cells like `24, worst 17` or `2, 1 FAIL, worst 12` (the block index of the worst row)."""
    if len(rows) <= KIND_ROWS:
        return list(rows), None
    groups: dict[str, list] = {}
    for r in rows:
        groups.setdefault(kind_of(r.name), []).append(r)
    shown = []
    for kind, members in groups.items():
        scores = [closeness(r) for r in members]
        top = max(range(len(members)), key=scores.__getitem__)
        worst, failing = members[top], sum(not r.passed for r in members)
        spread = len(set(scores)) > 1  # all alike (bitwise equal rows): no worst to name
        where = ",".join(_INDEX.findall(worst.name)) if spread else ""
        cell = ", ".join([str(len(members))] + ([f"{failing} FAIL"] if failing else [])
                         + ([f"worst {where}"] if where else []))
        shown.append((scores[top], dataclasses.replace(worst, name=kind), cell))
    shown.sort(key=lambda t: t[0], reverse=True)
    return [r for _, r, _ in shown], [c for _, _, c in shown]
