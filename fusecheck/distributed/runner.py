"""One `fusecheck dist` check end to end: spec -> rank pool -> per-rank verdicts -> summaries -> diagnosis."""
from __future__ import annotations

import atexit
import dataclasses
import importlib
import re
import time
from dataclasses import dataclass, field

from fusecheck.distributed.collectives import COLLECTIVES
from fusecheck.distributed.diagnosis import Diagnosis, Facts, diagnose
from fusecheck.distributed.pool import Outcome, RankPool
from fusecheck.distributed.spec import DistSpec, SpecError, load_spec
from fusecheck.distributed.stats import rate_summary
from fusecheck.distributed.summary import LayerSummary, cross_rank, summarize
from fusecheck.distributed.task import LAYERS, CheckTask

EXIT = {"PASS": 0, "FAIL": 1, "ERROR": 2, "HANG": 3, "CRASH": 3}

_POOLS: dict[tuple, RankPool] = {}


def get_pool(world: int, backend: str = "gloo", timeout_s: float = 30.0, start_method: str | None = None,
             outside: int = 0) -> RankPool:
    """A pool reused by every check of this process with the same (world, backend, timeout, start method,
    processes outside the kernel's group)."""
    key = (world, backend, timeout_s, start_method, outside)
    if key not in _POOLS:
        _POOLS[key] = RankPool(world, backend, timeout_s, start_method=start_method, outside=outside)
    return _POOLS[key]


@atexit.register
def close_pools() -> None:
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()


@dataclass
class DistReport:
    task: CheckTask
    spec: DistSpec
    world: int
    backend: str
    outcome: Outcome
    layers: dict[str, LayerSummary]
    cross: dict
    diagnosis: Diagnosis
    status: str
    elapsed_s: float
    results: list[dict] = field(default_factory=list)
    outside: int = 0      # processes outside the kernel's group: its group rank r is global rank r + outside

    @property
    def group_text(self) -> str:
        if not self.outside:
            return "the default group (group rank = global rank)"
        return (f"a subgroup: global ranks {self.outside}-{self.outside + self.world - 1} of "
                f"{self.outside + self.world} processes (group rank r = global rank r + {self.outside})")

    @property
    def exit_code(self) -> int:
        return EXIT[self.status]

    @property
    def caveats(self) -> list[str]:
        """What the verdict cannot tell from these runs (said in the report, never silently)."""
        out = []
        if self.task.repeat == 1 and self.status == "FAIL":
            out.append("this verdict rests on one run per shape: a race and a fixed layout bug look alike in one "
                       "run, so 'communication' or 'layout' may be a race; rerun with --repeat 10 (the default)")
        elif self.task.repeat == 1:
            out.append("one run per shape: a race that did not fire in this run is not excluded "
                       "(--repeat 10, the default, runs each shape ten times)")
        whole = self.layers.get("whole")
        if self.status == "PASS" and whole is not None and whole.runs:
            from fusecheck.rates import DEFAULT_REQUESTED_RATE as target, pct, runs_for_bound
            worst = max(whole.shape_rates().values(), key=lambda r: r.interval[1])
            if not worst.excludes(target):
                out.append(f"this PASS cannot exclude a {pct(target)} failure rate per run of the whole kernel: "
                           f"{worst.runs} clean runs per shape bound it below {pct(worst.interval[1])} (Wilson 95%); "
                           f"--repeat {runs_for_bound(target)} would bound it below {pct(target)}")
        return out

    def to_dict(self) -> dict:
        t = self.task
        whole = self.layers["whole"]
        return {
            "tool": "fusecheck dist", "status": self.status, "exit_code": self.exit_code,
            "spec": t.spec_ref, "spec_kwargs": t.spec_kwargs, "collective": self.spec.collective,
            "invariant": COLLECTIVES[self.spec.collective].invariant, "tiling": dict(self.spec.tiling),
            "world_size": self.world, "group": self.group_text, "backend": self.backend, "dtype": t.dtype, "seed": t.seed,
            "shapes": t.shapes or list(self.spec.shapes), "repeat": t.repeat, "stress": t.stress,
            "max_delay_ms": t.max_delay_ms if t.stress else None, "policy": t.policy.to_dict(),
            "run": self.outcome.to_dict(),
            "layers": {name: {**s.to_dict(), "runs": runs_of(self.results, name)}
                       for name, s in self.layers.items()},
            "cross_rank": self.cross,
            "repeat_stats": {name: {**rate_summary(s.failed_runs, s.runs), "unit": s.unit,
                                    **dict(zip(("ordinary", "probes"), (r.to_dict() for r in s.split_rates()))),
                                    "per_shape": {str(k): r.to_dict() for k, r in s.shape_rates().items()}}
                             for name, s in self.layers.items()},
            "whole_failure_rate": {**rate_summary(whole.failed_runs, whole.runs), "unit": whole.unit},
            "diagnosis": self.diagnosis.to_dict(),
            "caveats": self.caveats,
            "tags": next((r.get("tags") for r in self.results if r.get("tags")), None),
            "elapsed_s": self.elapsed_s,
        }


def runs_of(results: list[dict], layer: str) -> list[dict]:
    """One layer's results as runs, each with its per-rank verdicts: {"ranks": {"0": {...}, "1": {...}}}."""
    runs: dict[tuple, dict] = {}
    for r in results:
        if r["layer"] != layer:
            continue
        key = (r["shape_index"], r["repeat"], r.get("variant", ""))
        run = runs.setdefault(key, {"shape_index": key[0], "repeat": key[1], "variant": key[2] or None,
                                    "seed": r["seed"], "stress": r.get("stress"), "ranks": {}})
        run["ranks"][str(r["rank"])] = {k: v for k, v in r.items()
                                        if k not in ("layer", "rank", "shape_index", "repeat", "variant", "seed",
                                                     "stress")}
    return [runs[k] for k in sorted(runs)]


def check(task: CheckTask, world: int, backend: str = "gloo", timeout_s: float = 30.0,
          pool: RankPool | None = None, start_method: str | None = None, outside: int = 0) -> DistReport:
    spec = load_spec(task.spec_ref, **task.spec_kwargs)   # in the parent too: bad specs fail before ranks start
    if spec.collective not in COLLECTIVES:
        raise SpecError(f"{task.spec_ref}: collective {spec.collective!r} unknown; known: {', '.join(COLLECTIVES)}")
    if getattr(spec, "no_nan_inf", ()):
        import torch

        from fusecheck.distributed.spec import validate_spec
        validate_spec(spec, task.spec_ref, task.shapes or list(spec.shapes), world, task.seed,
                      getattr(torch, task.dtype))
    for module in spec.preload_modules:
        importlib.import_module(module)
    t0 = time.monotonic()
    pool = pool or get_pool(world, backend, timeout_s, start_method, outside)
    outcome = pool.run(task)
    return build_report(task, spec, world, backend, outcome, time.monotonic() - t0, pool.outside)


# what torch.distributed and gloo raise when a kernel on a subgroup names a peer by its group rank
GROUP_RANK_ERRORS = re.compile(r"is not part of group|Invalid (destination|source) rank|Pair is not connected|"
                               r"not in group|invalid rank|invalid tensor size", re.I)


def _group_rank_hint(outcome: Outcome, outside: int) -> None:
    """A CRASH on a subgroup with torch's 'rank not in group' errors: say what the kernel most likely did."""
    if outside and outcome.status == "CRASH" and not outcome.reason and any(
            GROUP_RANK_ERRORS.search(e.get("message", "") + e.get("traceback", "")) for e in outcome.errors.values()):
        outcome.reason = (f"group and default-group ranks or sizes mixed up: on a subgroup (group rank r = global rank "
                          f"r + {outside}) the kernel passed a group rank where torch.distributed takes a global one "
                          "(isend/irecv/P2POp peers, broadcast src: dist.get_global_rank(group, r), or group_dst=/"
                          "group_src=), or used dist.get_rank() / dist.get_world_size() without its group (a buffer "
                          "sized for the default group's world)")


def build_report(task: CheckTask, spec: DistSpec, world: int, backend: str, outcome: Outcome,
                 elapsed_s: float, outside: int = 0) -> DistReport:
    _group_rank_hint(outcome, outside)
    complete = outcome.status == "ok"
    results = sorted(outcome.results, key=lambda r: (LAYERS.index(r["layer"]), r["shape_index"], r["repeat"],
                                                     r.get("variant", ""), r["rank"]))
    layers = {name: summarize(name, results, world, complete) for name in LAYERS}
    for name in task.layers:
        if not complete and layers[name].status == "NOT RUN":
            layers[name].status = "INCOMPLETE"   # asked for, cut short by HANG/CRASH
    cross = cross_rank(results, world) if spec.outputs_agree else {"status": "NOT REQUIRED"}
    facts = Facts(layers["comm"], layers["compute"], layers["whole"], cross, outcome.status, outcome.ranks,
                  outcome.detail, world, outcome.reason)
    diagnosis = diagnose(facts)
    if outcome.status != "ok":
        status = outcome.status
    elif any(s.status == "FAIL" for s in layers.values()) or cross.get("status") == "FAIL":
        status = "FAIL"
    elif any(s.status in ("ERROR", "INCOMPLETE") for s in layers.values()) or not any(
            s.runs for s in layers.values()):
        status = "ERROR"
    else:
        status = "PASS"
    return DistReport(task, spec, world, backend, outcome, layers, cross, diagnosis, status, elapsed_s, results,
                      outside)


def replace_task(task: CheckTask, **changes) -> CheckTask:
    return dataclasses.replace(task, **changes)
