"""Diagnosis: which part of the kernel is wrong, from the three layers' verdicts (and HANG/CRASH).

Rules are a registry of small functions over the facts; each that applies adds a row to the diagnosis
table; the first that applies in RULES order is the primary cause.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fusecheck.distributed.summary import LayerSummary



@dataclass
class Facts:
    comm: LayerSummary
    compute: LayerSummary
    whole: LayerSummary
    cross: dict
    outcome: str            # ok / HANG / CRASH
    outcome_ranks: list[int]
    outcome_detail: str
    world: int
    outcome_reason: str = ""


@dataclass
class Finding:
    cause: str
    layer: str
    evidence: str

    def row(self) -> list[str]:
        return [self.cause, self.layer, self.evidence]


def _verdicts(f: Facts) -> str:
    return f"comm {f.comm.status}, compute {f.compute.status}, whole {f.whole.status}"


def _comm_detail(s: LayerSummary) -> str:
    kinds = {"misrouted": "data from the wrong rank (rank order)", "shifted": "right rank, wrong offset (chunking/layout)",
             "missing_ranks": "reduction missing ranks' contributions", "unwritten": "slots never written",
             "garbage": "values that are no tag (stale or poisoned data; in a reduction, a contribution added twice)"}
    parts = [f"{kinds[k]}: {n}" for k, n in sorted(s.classes.items(), key=lambda kv: -kv[1]) if k in kinds]
    return "; ".join(parts) or s.first_failure


def hang_or_crash(f: Facts) -> Finding | None:
    if f.outcome in ("HANG", "CRASH"):
        who = f"{f.outcome} on rank(s) {', '.join(map(str, f.outcome_ranks))}"
        return Finding(f"{who}: {f.outcome_reason}" if f.outcome_reason else who, "run", f.outcome_detail)
    return None


def synchronization(f: Facts) -> Finding | None:
    """Layer 1 giving different bits for identical inputs, or failures that come and go across repeats where
    the inputs cannot explain it (layer 1's tags never change; the whole kernel's inputs do, so its flakiness
    counts only when layer 2, run on the same inputs, passes)."""
    flaky = [name for name, s in (("comm", f.comm), ("whole", f.whole))
             if s.failed and s.intermittent_shapes and (name == "comm" or _unexplained_whole_failures(f))]
    varying = f.comm.nondeterministic_shapes
    timing = f.comm.timing_shapes
    if not flaky and not varying and not timing:
        return None
    why = []
    for name in flaky:
        s = getattr(f, name)
        why.append(f"{name} failed {s.failed_runs}/{s.runs} runs, passing and failing on the same shape"
                   + (f" (layer 2 passes on the same inputs of failing run(s) (shape, repeat) "
                      f"{_unexplained_whole_failures(f)[:5]})" if name == "whole" and f.compute.failed else ""))
    if varying:
        why.append(f"layer 1 got a different set of positions wrong for identical tagged inputs (shapes {varying})")
    if timing:
        why.append(f"a failing layer-1 run replayed with every rank pausing after each dist call got other positions "
                   f"wrong (shapes {timing}): the data arrives correctly when given time, so the kernel reads it "
                   "before it has arrived")
    if f.comm.failed:
        why.append(_comm_detail(f.comm))
    return Finding("synchronization (missing wait, early buffer reuse, race)", "comm+compute overlap", "; ".join(why))


def _unexplained_whole_failures(f: Facts) -> list[tuple[int, int]]:
    """(shape, repeat) runs where the whole kernel failed, on a shape where it also passed, while layer 2 on the
    same inputs (its finite variant of that shape and repeat) passed or did not run: a data-dependent compute
    bug explains a failure only on the runs where layer 2 fails too, not on the others."""
    compute_failed = {(shape, rep): failed for shape, rep, variant, failed in f.compute.run_outcomes
                      if variant in ("", "finite")}
    reproducible = {tuple(run) for run in f.whole.reproducible_runs}
    return [(shape, rep) for shape, rep, _, failed in f.whole.run_outcomes
            if failed and shape in f.whole.intermittent_shapes and not compute_failed.get((shape, rep))
            and (shape, rep) not in reproducible]


# `fusecheck.compare` codes for an output that could not be compared at all: the returned object's type, shape,
# dtype or device differs from the reference's. Deterministic properties of what a layer returns, not of timing.
CONTRACT_CODES = {"type_mismatch": "type", "shape_mismatch": "shape", "dtype_mismatch": "dtype",
                  "device_mismatch": "device"}
GOLDEN_CONTRACT_CODES = {"golden_shape_mismatch", "golden_type"}


def _contract_only(s: LayerSummary) -> bool:
    """Every failing result of this layer is an output-contract mismatch (no numeric verdict was reached)."""
    return bool(s.codes) and set(s.codes) <= CONTRACT_CODES.keys() | GOLDEN_CONTRACT_CODES


def output_contract(f: Facts) -> Finding | None:
    """A layer returned an output of the wrong type/shape/dtype/device (or the fp64 golden's shape differs from
    the eager one's): the entry point's output contract is broken, whatever the other layers say."""
    hits = [(name, s) for name, s in (("whole", f.whole), ("comm", f.comm), ("compute", f.compute))
            if s.failed and set(s.codes) & (CONTRACT_CODES.keys() | GOLDEN_CONTRACT_CODES)]
    if not hits:
        return None
    entry = {"whole": "fused", "comm": "comm_only", "compute": "compute_only"}
    label = {"whole": "layer 3 (whole)", "comm": "layer 1 (comm)", "compute": "layer 2 (compute)"}
    kernel = [(n, s) for n, s in hits if set(s.codes) & CONTRACT_CODES.keys()]
    if kernel:
        kinds = sorted({CONTRACT_CODES[c] for _, s in kernel for c in s.codes if c in CONTRACT_CODES})
        where = ", ".join(f"{entry[n]}()" for n, _ in kernel)
        return Finding(f"output contract: {where} returns the wrong {'/'.join(kinds)}",
                       ", ".join(label[n] for n, _ in kernel),
                       f"{_verdicts(f)}; " + "; ".join(s.first_failure for _, s in kernel))
    return Finding("golden contract: the spec's golden gives a different shape in fp64 than in the op dtype",
                   ", ".join(label[n] for n, _ in hits), "; ".join(s.first_failure for _, s in hits))


def rank_subset(f: Facts) -> Finding | None:
    """Whole kernel fails on some ranks but passes on others, compute alone is fine: layout / rank order; in
    the communication when layer 1 fails too, else in the fused path itself (its own layout or rank-specific
    code: layer 1's exact tags cleared the communication)."""
    runs = f.whole.ranks_per_failed_run
    if (f.whole.failed and not _fails_on_ordinary_inputs(f.compute) and not _contract_only(f.whole) and runs
            and all(0 < len(r) < f.world for r in runs)):
        if len(f.whole.failing_ranks) < f.world:
            where = f"whole fails on rank(s) {f.whole.failing_ranks} and passes on the others"
        else:
            where = ("whole fails on only some ranks in every failing run (rank sets "
                     + ", ".join(str(r) for r in runs[:5]) + (", ..." if len(runs) > 5 else "") + ")")
        if f.comm.failed:
            return Finding("layout / rank order (rank-dependent)", "communication",
                           f"{where}; {_verdicts(f)}{_shape_split(f.whole)}")
        replayed = len(f.whole.reproducible_runs) == f.whole.failed_runs
        return Finding("layout / rank order (rank-dependent) of the fused path, or rank-specific code in it (layer 1 "
                       "cleared the communication)", "layer 3 (whole)",
                       f"{where}; {_verdicts(f)}" + ("; every failing run gave the same bits when replayed"
                                                     if replayed else "") + _shape_split(f.whole))
    return None


def communication(f: Facts) -> Finding | None:
    """Layer 1 fails and layer 2 does not fail on ordinary inputs (a failure of layer 2 confined to its NaN/Inf or
    magnitude probes is a separate finding, not a reason to blame both layers for what layer 1 shows alone)."""
    if f.comm.failed and (not _fails_on_ordinary_inputs(f.compute) or _comm_leads(f)):
        extra = f"; {_determinism(f.comm)}" if f.comm.runs > 1 else ""
        return Finding("communication (rank order, chunking, buffer layout)", "layer 1 (comm)",
                       f"{_verdicts(f)}; {_comm_detail(f.comm)}{extra}")
    return None


def _comm_leads(f: Facts) -> bool:
    """Layer 1 fails on every run while layer 2 fails on a minority of its ordinary runs: layer 1 alone explains
    the whole kernel's failures; layer 2's few are their own finding (never a reason to blame both)."""
    comm, compute = f.comm.split_rates()[0], f.compute.split_rates()[0]
    return bool(comm.runs and compute.runs and comm.failures == comm.runs and 2 * compute.failures < compute.runs)


def _fails_on_ordinary_inputs(s: LayerSummary) -> bool:
    """Layer 2 failed on a run of ordinary inputs (not only on a NaN/Inf or magnitude probe variant)."""
    if not s.failed:
        return False
    if not s.run_outcomes:       # no per-run record (a hand-made summary): every failure counts
        return True
    return any(failed and (variant or "finite") == "finite" for _, _, variant, failed in s.run_outcomes)


def _determinism(s: LayerSummary) -> str:
    """How layer 1's failures repeat: the same positions in every repeat is a fixed layout bug, not timing."""
    if s.nondeterministic_shapes:
        return f"the wrong positions change between repeats on shape(s) {s.nondeterministic_shapes}"
    out = (f"deterministic: the same positions are wrong in every repeat"
           + (" (the values left there differ between repeats: never-written slots holding workspace garbage)"
              if s.values_vary_shapes else ""))
    if s.classes and set(s.classes) <= {"garbage", "unwritten"}:
        out += ("; every wrong element holds stale or poisoned data: slots never written, or read before the "
                "collective wrote them (a backend that writes its output at wait(), as gloo's reduce_scatter "
                "does, makes a missing wait() read the same stale bytes every time, and no pause can change it)")
    return out + _shape_split(s)


def _shape_split(s: LayerSummary) -> str:
    """'; fails on shape(s) [1] in every run and never on shape(s) [0, 2]' when the shapes split that way."""
    rates = s.shape_rates()
    always = [k for k, r in rates.items() if r.runs > 1 and r.failures == r.runs]
    never = [k for k, r in rates.items() if r.failures == 0]
    return f"; fails on shape(s) {always} in every run and never on shape(s) {never}" if always and never else ""


def compute(f: Facts) -> Finding | None:
    if f.compute.failed and not f.comm.failed:
        extra = _probe_kind(f.compute.variants_failed)
        return Finding("compute" + extra, "layer 2 (compute)",
                       f"{_verdicts(f)}{_shape_split(f.compute)}; {f.compute.first_failure}")
    return None


# layer-2 probe variants (prefix -> how the cause names them) when only they fail, not ordinary inputs
PROBES = {"nan_inf": "NaN/Inf propagation", "magnitude": "magnitude"}


def _probe_kind(variants: list[str]) -> str:
    kinds = {v.split(":", 1)[0] for v in variants}
    if not variants or not kinds <= PROBES.keys():
        return ""
    return " (" + "; ".join(PROBES[k] + ": " + ", ".join(v.split(":", 1)[1] for v in variants if v.startswith(k))
                            for k in sorted(kinds)) + ")"


def compute_probes_with_comm(f: Facts) -> Finding | None:
    """Layer 1 fails and layer 2 fails only on probe variants: both are reported, layer 1 as the cause."""
    if f.comm.failed and f.compute.failed and not _fails_on_ordinary_inputs(f.compute):
        return Finding("compute" + _probe_kind(f.compute.variants_failed), "layer 2 (compute)",
                       f"only on probe variants; {f.compute.first_failure}")
    if f.comm.failed and f.compute.failed and _comm_leads(f):
        ordinary = f.compute.split_rates()[0]
        return Finding("compute", "layer 2 (compute)", f"on {ordinary.failures} of {ordinary.runs} ordinary runs "
                       "(layer 1 fails on every run); "
                       f"{f.compute.first_failure}")
    return None


def both(f: Facts) -> Finding | None:
    if f.compute.failed and f.comm.failed and _fails_on_ordinary_inputs(f.compute) and not _comm_leads(f):
        return Finding("communication and compute", "layers 1 and 2",
                       f"{_verdicts(f)}; comm: {_comm_detail(f.comm)}; compute: {f.compute.first_failure}")
    return None


def fused_deterministic(f: Facts) -> Finding | None:
    """Only the fused kernel fails, and every failing run gave the same bits when replayed on its inputs (as it
    ran and with a straggler rank): a fault of the fused path's arithmetic or layout on those inputs, not timing."""
    runs = f.whole.failed_runs
    if (f.whole.failed and not f.comm.failed and not f.compute.failed and not _contract_only(f.whole)
            and runs and len(f.whole.reproducible_runs) == runs):
        some = runs < f.whole.runs
        return Finding(f"the fused path{' on some inputs' if some else ''}, deterministically ("
                       + ("a data-dependent bug or a path that the identity modes do not share" if some else
                          "a path that the identity modes do not share") + "; not synchronization)", "layer 3 (whole)",
                       f"{_verdicts(f)}; each of the {runs} failing run(s) gave the same bits when replayed on its "
                       f"inputs, as it ran and with a straggler rank{_shape_split(f.whole)}; {f.whole.first_failure}")
    return None


def fused_only(f: Facts) -> Finding | None:
    if f.whole.failed and not f.comm.failed and not f.compute.failed and not _contract_only(f.whole):
        return Finding("interaction of communication and compute (overlap/synchronization that only the fused "
                       "path exercises, or identity modes that differ from it)", "layer 3 (whole)",
                       f"{_verdicts(f)}{_shape_split(f.whole)}; {f.whole.first_failure}")
    return None


def cross_rank(f: Facts) -> Finding | None:
    if f.cross.get("status") == "FAIL":
        m = f.cross["mismatches"][0]
        return Finding("outputs differ across ranks (rank-dependent reduction order or layout)", "layer 3 (whole)",
                       f"{len(f.cross['mismatches'])} run(s); e.g. shape {m['shape_index']} repeat {m['repeat']}: "
                       f"ranks {m['ranks_differing_from_rank0']} differ from rank 0")
    return None


def incomplete(f: Facts) -> Finding | None:
    missing = f.comm.missing + f.compute.missing + f.whole.missing
    if missing:
        return Finding("missing results (no verdict)", "run", "; ".join(missing[:3]))
    return None


def bad_input(f: Facts) -> Finding | None:
    errored = [(name, s) for name, s in (("comm", f.comm), ("compute", f.compute), ("whole", f.whole))
               if s.status == "ERROR"]
    if errored:
        name, s = errored[0]
        return Finding("no verdict: bad input or spec contract broken", f"layer {name}", s.first_failure)
    return None


RULES: list[Callable[[Facts], Finding | None]] = [
    hang_or_crash, incomplete, bad_input, synchronization, output_contract, rank_subset, communication, compute, compute_probes_with_comm,
    both,
    fused_deterministic, fused_only, cross_rank,
]


@dataclass
class Diagnosis:
    cause: str
    findings: list[Finding]

    def to_dict(self) -> dict:
        return {"cause": self.cause, "findings": [f.__dict__ for f in self.findings]}


def diagnose(facts: Facts) -> Diagnosis:
    findings = [f for f in (rule(facts) for rule in RULES) if f is not None]
    return Diagnosis(findings[0].cause if findings else "none (every layer passed)", findings)
