"""Position tags for layer 1, always in the op's dtype: every element encodes its source rank and offset
exactly, so a wrong result decodes to "rank 2 holds rank 0's block 3 where rank 1's block 3 belongs", and a
bf16 kernel's communication runs its bf16 code path (a kernel that branches on dtype is tested as it runs).

Two schemes, chosen by the collective; a tag too large for one tensor is split into digits carried by
several sub-runs of the same kernel (same tags every repeat, so a varying result is timing, not data):
- MOVE (gather, all-to-all; data is only moved, bits survive): tag = src * L + offset (L = elements per
  rank), written in base B as finite normal values of the dtype whose bit patterns are the digits (fp16 has
  B = 53248 such values below the poison range, so two sub-runs tag 2.8e9 elements).
- SUM (all-reduce, reduce-scatter; data is added): integers, exact in the dtype whatever the order of the
  additions. Rank sub-runs: rank r sends 2**r (ranks in groups of as many bits as the dtype holds), so the
  sum's bits say which ranks contributed; position sub-runs: every rank sends +-(H + digit j of offset) x S,
  H the largest power of two with W * 2H <= the largest exact integer, S = 2^-(bits(H) + 7) (so |values| lie
  in [2^-8, 2^-7)), the sign alternating with the offset's parity; a correct sum is W times that. The H
  makes every value use the dtype's whole significand: a transfer that rounds through a narrower dtype (fp32
  data sent as bf16), or snaps values to a coarser grid, changes the odd digits; the signs catch a path that
  clamps or drops negative values. Small non-negative integers would pass all three.
NaN and 0 decode as "unwritten"; +-Inf, poison and any other value that is not a tag as "garbage".
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass

import torch

from fusecheck.distributed.ranges import EXACT_INT_LIMIT, poison_range

INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}
MAX_DECODED = 200_000   # elements decoded per rank; the rest only counted
TAG_OCTAVE = 7          # SUM offset tags lie in [2^-(TAG_OCTAVE+1), 2^-TAG_OCTAVE)
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
            return "garbage (not a tag: poisoned workspace, stale data, or a reduction that added a contribution twice)"
        row = self.offset // row_len
        who = f"rank {self.src[0]}" if len(self.src) == 1 else "ranks " + ",".join(map(str, self.src))
        return f"{who}'s block {row // block_rows} (row {row})"


UNWRITTEN, GARBAGE = Origin("unwritten", (), -1), Origin("garbage", (), -1)


def _digits_needed(base: int, count: int) -> int:
    """Sub-runs that carry `count` distinct values in base `base` (at least one)."""
    n = 1
    while base ** n < count:
        n += 1
    return n


class BitPatterns:
    """Digits <-> finite normal values of a float dtype, through their bit patterns: digit d is the value whose
    bits are (smallest normal + d // 2) with the sign bit d % 2. Only magnitudes below the workspace poison
    range are used, so poison never decodes as a tag; 0, NaN, Inf and subnormals are never tags."""

    def __init__(self, dtype: torch.dtype):
        if dtype not in INT_VIEW:
            raise ValueError(f"layer 1 tags need a floating dtype, not {dtype}")
        self.dtype, self.itype = dtype, INT_VIEW[dtype]
        self.lo = self._bits(torch.finfo(dtype).tiny)
        self.hi = self._bits(poison_range(dtype)[0])
        self.imin = torch.iinfo(self.itype).min
        self.base = 2 * (self.hi - self.lo)

    def _bits(self, value: float) -> int:
        return int(torch.tensor(value, dtype=self.dtype).view(self.itype).item())

    def encode(self, digits: torch.Tensor) -> torch.Tensor:
        p = self.lo + (digits >> 1)
        signed = torch.where((digits & 1).bool(), p + self.imin, p)
        return signed.to(self.itype).view(self.dtype)

    def decode(self, values: torch.Tensor) -> tuple[list[int], list[str]]:
        """(digit, kind) per element; kind is "ok", "unwritten" or "garbage"."""
        x = values.contiguous().view(self.itype).to(torch.int64)
        neg = x < 0
        p = torch.where(neg, x - self.imin, x)
        ok = (p >= self.lo) & (p < self.hi)
        blank = torch.isnan(values) | (values == 0)
        kinds = torch.where(blank, 1, torch.where(ok, 0, 2)).tolist()
        return ((p - self.lo) * 2 + neg).tolist(), [("ok", "unwritten", "garbage")[k] for k in kinds]


@dataclass
class TagPlan:
    """One tagging of a layer-1 run: the scheme, the dtype and how many sub-runs carry the digits."""

    scheme: str
    dtype: torch.dtype
    world: int
    numel: int
    subruns: int
    description: str

    def encode(self, rank: int, shape: tuple) -> list[torch.Tensor]:
        raise NotImplementedError

    def decode(self, values: list[torch.Tensor]) -> list[Origin]:
        """`values[j]`: sub-run j's values at the same (flattened) positions."""
        raise NotImplementedError

    def to_dict(self) -> dict:
        return {"scheme": self.scheme, "dtype": str(self.dtype).removeprefix("torch."), "subruns": self.subruns,
                "description": self.description}


class MovePlan(TagPlan):
    def __init__(self, dtype: torch.dtype, world: int, numel: int):
        self.bits = BitPatterns(dtype)
        base = self.bits.base
        subruns = _digits_needed(base, world * max(1, numel))
        super().__init__("move", dtype, world, numel, subruns,
                         f"bit patterns of {str(dtype).removeprefix('torch.')} values (base {base}), "
                         f"{subruns} sub-run(s)")

    def encode(self, rank, shape):
        n = int(torch.Size(shape).numel())
        t = torch.arange(n, dtype=torch.int64) + rank * n
        B = self.bits.base
        return [self.bits.encode((t // B ** j) % B).reshape(shape) for j in range(self.subruns)]

    def decode(self, values):
        decoded = [self.bits.decode(v.reshape(-1)) for v in values]
        out = []
        B, total = self.bits.base, self.world * self.numel
        for i in range(values[0].numel()):
            kinds = {kinds_j[i] for _, kinds_j in decoded}
            if "unwritten" in kinds:
                out.append(UNWRITTEN)
                continue
            if "garbage" in kinds:
                out.append(GARBAGE)
                continue
            t = sum(digits_j[i] * B ** j for j, (digits_j, _) in enumerate(decoded))
            out.append(Origin("tag", (t // self.numel,), t % self.numel) if t < total else GARBAGE)
        return out


class SumPlan(TagPlan):
    def __init__(self, dtype: torch.dtype, world: int, numel: int):
        if dtype not in EXACT_INT_LIMIT:
            raise ValueError(f"layer 1 tags need a floating dtype, not {dtype}")
        limit = EXACT_INT_LIMIT[dtype]
        self.rank_bits = int(math.log2(limit + 1))            # 2**k - 1 (every bit set) must be exact
        self.groups = -(-world // self.rank_bits)
        per_rank = limit // world                              # W ranks x value <= limit
        if per_rank < 4:
            raise ValueError(f"{world} ranks cannot be tagged exactly in {dtype} (integers up to {limit})")
        self.high = 2 ** (per_rank.bit_length() - 2)           # H <= per_rank / 2: values H + digit fill the significand
        self.base = min(self.high, per_rank - self.high)
        # |(H + digit) x S| in [2^-8, 2^-7): dyadic and exact; small, so an absolute grid (values snapped to
        # 1/64) moves them too, and normal in fp16 (down to 2^-14)
        self.scale = 2.0 ** -(self.high.bit_length() + TAG_OCTAVE)
        self.digits = _digits_needed(self.base, max(1, numel))
        super().__init__("sum", dtype, world, numel, self.groups + self.digits,
                         f"exact sums in {str(dtype).removeprefix('torch.')}: ranks as bits "
                         f"({self.groups} sub-run(s)), offsets as +-({self.high} + a digit in base {self.base}) "
                         f"x 2^-{self.high.bit_length() + TAG_OCTAVE}, the sign alternating by offset "
                         f"({self.digits} sub-run(s))")

    def encode(self, rank, shape):
        n = int(torch.Size(shape).numel())
        out = [torch.full((n,), float(2 ** (rank - g * self.rank_bits)) if rank // self.rank_bits == g else 0.0,
                          dtype=torch.float64) for g in range(self.groups)]
        offset = torch.arange(n, dtype=torch.int64)
        sign = 1.0 - 2.0 * (offset % 2).double()
        out += [sign * ((offset // self.base ** j) % self.base + self.high).double() * self.scale
                for j in range(self.digits)]
        return [t.reshape(shape).to(self.dtype) for t in out]

    def decode(self, values):
        cols = [v.reshape(-1).double().tolist() for v in values]
        out = []
        for vals in zip(*cols):
            if any(v != v for v in vals) or not any(vals):
                out.append(UNWRITTEN)
                continue
            if not (all(math.isfinite(v) for v in vals)
                    and all(v == int(v) and v >= 0 for v in vals[:self.groups])):
                out.append(GARBAGE)
                continue
            ranks = self._ranks(vals[:self.groups])
            out.append(GARBAGE if ranks is None else self._position(ranks, vals[self.groups:]))
        return out

    def _ranks(self, sums) -> tuple | None:
        """The contributing ranks from the rank sub-runs' sums (each group's bits), None if not a bit set."""
        ranks = []
        for g, v in enumerate(sums):
            if v >= 2 ** self.rank_bits:
                return None
            ranks += [g * self.rank_bits + b for b in range(self.rank_bits) if int(v) >> b & 1]
        return tuple(ranks) if all(r < self.world for r in ranks) else None

    def _position(self, ranks: tuple, sums) -> Origin:
        if not ranks:
            return GARBAGE
        offset, signs = 0, set()
        for j, s in enumerate(sums):
            unscaled = s / self.scale
            if unscaled != int(unscaled):
                return GARBAGE   # off the tags' grid: rounded or snapped in transit
            q, rem = divmod(abs(int(unscaled)), len(ranks))
            if rem or not 0 <= q - self.high < self.base:
                return GARBAGE   # contributions from different offsets, counted twice, or rounded in transit
            offset += (q - self.high) * self.base ** j
            signs.add(unscaled > 0)
        if offset >= self.numel or signs != {offset % 2 == 0}:
            return GARBAGE       # a sign lost or flipped (negative values clamped or dropped)
        return Origin("tag" if len(ranks) == self.world else "partial", ranks, offset)


@dataclass(frozen=True)
class TagScheme:
    name: str
    plan_cls: type

    def plan(self, dtype: torch.dtype, world: int, numel: int) -> TagPlan:
        return self.plan_cls(dtype, world, numel)


MOVE = TagScheme("move", MovePlan)
SUM = TagScheme("sum", SumPlan)


def explain(got: list[torch.Tensor], expected: list[torch.Tensor], plan: TagPlan, row_len: int, block_rows: int,
            rank: int) -> tuple[list[str], dict[str, int]]:
    """Decode the elements where any sub-run of `got` differs from `expected`; group them into readable lines.

    Returns (lines, counts by class): classes are "misrouted" (wrong source rank), "shifted" (right rank,
    wrong offset), "missing_ranks" (SUM without some ranks), "unwritten", "garbage".
    """
    gs, es = [g.reshape(-1) for g in got], [e.reshape(-1) for e in expected]
    differs = torch.zeros_like(gs[0], dtype=torch.bool)
    for g, e in zip(gs, es):
        differs |= (g != e) & ~(torch.isnan(g) & torch.isnan(e))
    bad = torch.nonzero(differs).reshape(-1)
    total = int(bad.numel())
    bad = bad[:MAX_DECODED]
    got_o = plan.decode([g[bad] for g in gs])
    exp_o = plan.decode([e[bad] for e in es])
    world = plan.world
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
