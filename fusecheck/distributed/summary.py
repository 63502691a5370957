"""Per-layer summaries of the per-rank results: which runs failed, on which ranks, how often (with a bound)."""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

from fusecheck.rates import Rate

# what one run of a layer is: the entry point it calls, once per run on every rank (layer 1 calls comm_only
# once per tag sub-run); a run fails when any rank's verdict fails
UNIT_CALLS = {"comm": "comm_only", "compute": "compute_only", "whole": "fused"}
# run variants that are draws of the ordinary inputs (the others are layer 2's probes)
ORDINARY = ("finite", "stressed")


@dataclass
class LayerSummary:
    layer: str
    status: str = "NOT RUN"          # PASS / FAIL / ERROR / NOT RUN / INCOMPLETE
    runs: int = 0
    failed_runs: int = 0
    failing_ranks: list[int] = field(default_factory=list)
    ranks_per_failed_run: list[list[int]] = field(default_factory=list)
    codes: dict[str, int] = field(default_factory=dict)           # verdict codes of failing rank results
    classes: dict[str, int] = field(default_factory=dict)         # layer-1 decoded error classes
    decoded: list[str] = field(default_factory=list)              # layer-1 lines of the first failing run
    first_failure: str = ""
    variants_failed: list[str] = field(default_factory=list)
    intermittent_shapes: list[int] = field(default_factory=list)  # shapes with both passing and failing runs
    missing: list[str] = field(default_factory=list)
    nondeterministic_shapes: list[int] = field(default_factory=list)  # same inputs, different output bits
    run_outcomes: list[list] = field(default_factory=list)   # [shape, repeat, variant, failed] per complete run
    calls_per_run: int = 1        # entry-point calls per rank in one run (layer 1: one per tag sub-run)
    world: int = 1
    values_vary_shapes: list[int] = field(default_factory=list)  # same wrong positions, different values there
    # layer 3: failing runs whose replays on the same inputs (as run, and with a straggler) gave the same bits
    # on every rank: deterministic, so no race explains them
    reproducible_runs: list[list[int]] = field(default_factory=list)
    # layer 1: shapes where a failing run, replayed with every rank pausing after each dist call, got another
    # set of positions wrong: timing decides them (a read before its wait), not layout
    timing_shapes: list[int] = field(default_factory=list)

    def shape_rates(self) -> dict[int, Rate]:
        """Failure rate per shape: a deterministic tail-only bug is 100% on its shape and 0% on the others,
        never a pooled fraction."""
        out: dict[int, list[int]] = {}
        for shape, _rep, _variant, failed in self.run_outcomes:
            n = out.setdefault(shape, [0, 0])
            n[0] += bool(failed)
            n[1] += 1
        return {k: Rate(f, n, calls=self.calls_per_run, ranks=self.world) for k, (f, n) in sorted(out.items())}

    def overall_rate(self) -> Rate:
        return Rate(self.failed_runs, self.runs, calls=self.calls_per_run, ranks=self.world)

    def split_rates(self) -> tuple[Rate, Rate]:
        """(ordinary runs, probe runs): layer 2's NaN/Inf and magnitude probes are other inputs, not more draws of
        the same run, so a bug seen only by a probe is "0/3 ordinary, 2/39 probes", never a pooled 2/42."""
        counts = {True: [0, 0], False: [0, 0]}
        for _shape, _rep, variant, failed in self.run_outcomes:
            n = counts[(variant or "finite") in ORDINARY]
            n[0] += bool(failed)
            n[1] += 1
        return tuple(Rate(f, n, calls=self.calls_per_run, ranks=self.world) for f, n in (counts[True], counts[False]))

    @property
    def unit(self) -> str:
        calls = self.calls_per_run
        return (f"1 run = {calls} call{'s' if calls != 1 else ''} of {UNIT_CALLS.get(self.layer, self.layer)}() "
                f"on each of {self.world} rank(s), one shape, one repeat (and one probe variant); it fails when any "
                f"rank's verdict fails")

    def deterministic_shapes(self) -> list[int]:
        """Shapes that failed in every run and shapes that passed in every run, when both exist."""
        return [k for k, r in self.shape_rates().items() if r.runs and r.failures == r.runs]

    @property
    def failed(self) -> bool:
        return self.status in ("FAIL", "ERROR")

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["failure_rate"] = {**self.overall_rate().to_dict(), "unit": self.unit}
        d["unit"] = self.unit
        d["per_shape_rates"] = {str(k): r.to_dict() for k, r in self.shape_rates().items()}
        return d


def run_key(r: dict) -> tuple:
    return (r["shape_index"], r["repeat"], r.get("variant", ""))


def summarize(layer: str, results: list[dict], world: int, complete: bool) -> LayerSummary:
    """`complete` is False after a HANG/CRASH: runs some ranks never finished are not counted."""
    s = LayerSummary(layer, world=world)
    runs: dict[tuple, dict[int, dict]] = collections.defaultdict(dict)
    for r in results:
        if r["layer"] == layer:
            runs[run_key(r)][r["rank"]] = r
    if not runs:
        return s
    codes, classes, variants = collections.Counter(), collections.Counter(), set()
    failing, per_shape = set(), collections.defaultdict(set)
    any_fail = False
    for key in sorted(runs):
        ranks = runs[key]
        if len(ranks) < world:
            if complete:
                s.missing.append(f"run {key}: no result from rank(s) "
                                 f"{sorted(set(range(world)) - set(ranks))}")
            continue
        s.runs += 1
        bad = sorted(r for r, res in ranks.items() if not res["passed"])
        per_shape[key[0]].add(bool(bad))
        s.run_outcomes.append([key[0], key[1], key[2] or "", bool(bad)])
        if not bad:
            continue
        s.failed_runs += 1
        s.ranks_per_failed_run.append(bad)
        if all(res.get("replayed_same_bits") for res in ranks.values()):
            s.reproducible_runs.append([key[0], key[1]])
        failing |= set(bad)
        if key[2]:
            variants.add(key[2])
        for r in bad:
            res = ranks[r]
            v = res["comparison"]["verdict"]
            codes[v["code"]] += 1
            any_fail |= v["status"] == "FAIL"
            classes.update(res.get("classes") or {})
        if not s.first_failure:
            r0 = ranks[bad[0]]
            s.first_failure = (f"shape {key[0]} repeat {key[1]}{' ' + key[2] if key[2] else ''}, rank {bad[0]}: "
                               f"{r0['comparison']['verdict']['code']}: {r0['comparison']['verdict']['message']}")
            s.decoded = [line for r in bad for line in ranks[r].get("decoded") or []]
    s.failing_ranks, s.codes, s.classes = sorted(failing), dict(codes), dict(classes)
    s.variants_failed = sorted(variants)
    s.intermittent_shapes = sorted(k for k, outcomes in per_shape.items() if outcomes == {True, False})
    if layer == "comm":  # layer-1 inputs (tags) are identical in every repeat
        # a race changes *which* positions are wrong (or whether any are) between repeats; a layout bug gets the
        # same positions wrong every time, even when a never-written slot holds garbage that differs per repeat
        wrong, bits = collections.defaultdict(set), collections.defaultdict(set)
        for key, ranks in runs.items():
            for r, res in ranks.items():
                wrong[(key[0], r)].add(res.get("wrong", res.get("digest")))
                bits[(key[0], r)].add(res.get("digest"))
        s.nondeterministic_shapes = sorted({k[0] for k, d in wrong.items() if len(d) > 1})
        s.timing_shapes = sorted({key[0] for key, ranks in runs.items()
                                  if any(res.get("replay_changed") for res in ranks.values())})
        s.values_vary_shapes = sorted({k[0] for k, d in bits.items() if len(d) > 1} - set(s.nondeterministic_shapes))
        s.calls_per_run = max([int((res.get("tags") or {}).get("subruns") or 1)
                               for ranks in runs.values() for res in ranks.values()] or [1])
    if s.failed_runs:
        s.status = "FAIL" if any_fail else "ERROR"   # ERROR: could not judge (bad input), never a pass
    elif s.missing:
        s.status = "ERROR"
    elif s.runs:
        s.status = "PASS" if complete else "INCOMPLETE"
    else:
        s.status = "INCOMPLETE"
    return s


def cross_rank(results: list[dict], world: int) -> dict:
    """Whole-kernel outputs that must agree on all ranks: compare each rank's output digest with rank 0's."""
    runs: dict[tuple, dict[int, str]] = collections.defaultdict(dict)
    for r in results:
        if r["layer"] == "whole" and r.get("digest"):
            runs[run_key(r)][r["rank"]] = r["digest"]
    bad = []
    for key, digests in sorted(runs.items()):
        if len(digests) == world and len(set(digests.values())) > 1:
            differ = sorted(r for r, d in digests.items() if d != digests[0])
            bad.append({"shape_index": key[0], "repeat": key[1], "ranks_differing_from_rank0": differ})
    return {"status": "FAIL" if bad else ("PASS" if runs else "NOT RUN"), "runs": len(runs), "mismatches": bad}
