"""Position tags for layer 1: every element encodes its source rank and offset, exactly, so a wrong result
decodes to "rank 2 holds rank 0's block 3 where rank 1's block 3 belongs".

Two schemes, chosen by the collective:
- MOVE (gather, all-to-all): tag = src * L + offset + 1 (L = elements per rank). 0 means "never written".
- SUM (all-reduce, reduce-scatter): tag = (offset + 1) * 2**W + 2**src. A correct sum is
  W*(offset+1)*2**W + (2**W - 1): the low W bits say which ranks contributed, the rest which offset.
NaN and 0 decode as "unwritten"; +-Inf and any other value that is not a tag as "garbage".
Tags must be exactly representable: the op dtype is used when its integer range suffices, else fp32, else fp64
(the report says which).
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Callable

import torch

EXACT_INT_LIMIT = {torch.float16: 2**11, torch.bfloat16: 2**8, torch.float32: 2**24, torch.float64: 2**53}
MAX_DECODED = 200_000   # elements decoded per rank; the rest only counted
MAX_LINES = 8


@dataclass(frozen=True)
class Origin:
    """Where one element came from (or what it is, if it came from nowhere)."""

    kind: str               # "tag" (a valid tag), "unwritten" (0/NaN), "garbage" (not a tag), "partial" (SUM: wrong ranks)
    src: tuple[int, ...]    # source rank(s)
    offset: int             # element offset in the source tensor, -1 if unknown

    def describe(self, row_len: int, block_rows: int) -> str:
        if self.kind == "unwritten":
            return "unwritten data (0/NaN)"
        if self.kind == "garbage":
            return "garbage (poisoned workspace or stale data, not a tag)"
        row = self.offset // row_len
        who = f"rank {self.src[0]}" if len(self.src) == 1 else "ranks " + ",".join(map(str, self.src))
        return f"{who}'s block {row // block_rows} (row {row})"


@dataclass(frozen=True)
class TagScheme:
    name: str
    max_tag: Callable[[int, int], int]                     # (world, L) -> largest value that must be exact
    encode: Callable[[int, int, tuple, torch.dtype], torch.Tensor]
    decode: Callable[[torch.Tensor, int, int], list[Origin]]

    def dtype_for(self, op_dtype: torch.dtype, world: int, numel: int) -> torch.dtype:
        need = self.max_tag(world, numel)
        for dt in (op_dtype, torch.float32, torch.float64):
            if dt in EXACT_INT_LIMIT and need <= EXACT_INT_LIMIT[dt]:
                return dt
        raise ValueError(f"{numel} elements x {world} ranks cannot be tagged exactly even in float64")


def _encode_move(rank: int, world: int, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    n = int(torch.Size(shape).numel())
    return (torch.arange(n, dtype=torch.float64) + 1 + rank * n).reshape(shape).to(dtype)


def _decode_move(values: torch.Tensor, world: int, numel: int) -> list[Origin]:
    out = []
    for v in values.double().tolist():
        if v != v or v == 0:
            out.append(Origin("unwritten", (), -1))
        elif not math.isfinite(v) or v != int(v) or not 1 <= v <= world * numel:  # +-Inf: overflowed garbage
            out.append(Origin("garbage", (), -1))
        else:
            t = int(v) - 1
            out.append(Origin("tag", (t // numel,), t % numel))
    return out


def _encode_sum(rank: int, world: int, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    n = int(torch.Size(shape).numel())
    return ((torch.arange(n, dtype=torch.float64) + 1) * 2**world + 2**rank).reshape(shape).to(dtype)


def _decode_sum(values: torch.Tensor, world: int, numel: int) -> list[Origin]:
    out = []
    for v in values.double().tolist():
        if v != v or v == 0:
            out.append(Origin("unwritten", (), -1))
            continue
        if not math.isfinite(v) or v != int(v) or v < 0 or v > world * (numel + 1) * 2**world:
            out.append(Origin("garbage", (), -1))
            continue
        low, high = int(v) % 2**world, int(v) >> world
        ranks = tuple(r for r in range(world) if low >> r & 1)
        if ranks and high % len(ranks) == 0 and 1 <= high // len(ranks) <= numel:
            kind = "tag" if len(ranks) == world else "partial"
            out.append(Origin(kind, ranks, high // len(ranks) - 1))
        else:
            out.append(Origin("garbage", (), -1))
    return out


MOVE = TagScheme("move", lambda w, n: w * n, _encode_move, _decode_move)
SUM = TagScheme("sum", lambda w, n: w * (n + 1) * 2**w, _encode_sum, _decode_sum)


def explain(got: torch.Tensor, expected: torch.Tensor, scheme: TagScheme, world: int, numel: int,
            row_len: int, block_rows: int, rank: int) -> tuple[list[str], dict[str, int]]:
    """Decode the elements where `got` differs from `expected`; group them into a few readable lines.

    Returns (lines, counts by class): classes are "misrouted" (wrong source rank), "shifted" (right rank,
    wrong offset), "missing_ranks" (SUM without some ranks), "unwritten", "garbage".
    """
    g, e = got.reshape(-1), expected.reshape(-1)
    bad = torch.nonzero((g != e) & ~(torch.isnan(g) & torch.isnan(e))).reshape(-1)
    total = int(bad.numel())
    bad = bad[:MAX_DECODED]
    got_o = scheme.decode(g[bad], world, numel)
    exp_o = scheme.decode(e[bad], world, numel)
    groups: collections.Counter = collections.Counter()
    first_pos: dict = {}
    classes: collections.Counter = collections.Counter()
    for pos, go, eo in zip(bad.tolist(), got_o, exp_o):
        cls = _classify(go, eo)
        classes[cls] += 1
        shift = (go.offset - eo.offset) // row_len if cls == "shifted" else 0
        key = (cls, go.kind, go.src, eo.src, shift,
               go.offset // row_len // block_rows if go.offset >= 0 else -1,
               eo.offset // row_len // block_rows if eo.offset >= 0 else -1)
        groups[key] += 1
        first_pos.setdefault(key, (pos, go, eo))
    lines = []
    for key, count in groups.most_common(MAX_LINES):
        pos, go, eo = first_pos[key]
        extra = f", shifted by {key[4]:+d} row(s)" if key[0] == "shifted" else ""
        if key[0] == "missing_ranks":
            extra = ", missing rank(s) " + ",".join(str(r) for r in range(world) if r not in go.src)
        lines.append(f"rank {rank}: {count} element(s) hold {go.describe(row_len, block_rows)} where "
                     f"{eo.describe(row_len, block_rows)} belongs [{key[0]}{extra}; first at flat index {pos}]")
    if len(groups) > MAX_LINES:
        lines.append(f"rank {rank}: ... {len(groups) - MAX_LINES} more pattern(s)")
    if total > MAX_DECODED:
        lines.append(f"rank {rank}: {total - MAX_DECODED} more wrong element(s) not decoded")
    return lines, dict(classes)


def _classify(go: Origin, eo: Origin) -> str:
    if go.kind in ("unwritten", "garbage"):
        return go.kind
    if go.kind == "partial":
        return "missing_ranks" if go.offset == eo.offset else "shifted"
    if go.src != eo.src:
        return "misrouted"
    return "shifted"
