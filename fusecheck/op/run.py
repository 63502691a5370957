"""`check_op`: a fused op against its unfused chain, every dtype x shape x repeat, plus the probes.

Per (dtype, shape) and repeat i, fresh inputs (seed + i) go through `fused` (the run under test), the
reference in the op dtype (eager) and the reference in fp64 (golden); every output (and gradient, with
`train`) is judged by the one comparison core, `fusecheck.compare.compare`: not worse than the unfused chain
against the fp64 golden. A run fails when any of its rows fails; the failure rate with its Wilson bound is
counted per shape and overall (fusecheck/rates.py). On the first repeat the probes run too (NaN/Inf in each
input, huge/tiny/subnormal rows; fusecheck/op/probes.py), forward only.
"""
from __future__ import annotations

import time

import torch

from fusecheck.compare import Comparison, compare, input_error
from fusecheck.devices import resolve_device, resolve_dtype
from fusecheck.op.calls import call, cast, cotangents, grad_names
from fusecheck.op.noise import settle, wide_reference
from fusecheck.op.probes import PROPAGATION, Probe, apply, probes_for
from fusecheck.op.report import OpReport, RunRecord, shape_text
from fusecheck.op.spec import OpSpec, SpecError, make_inputs
from fusecheck.policy import Policy
from fusecheck.rates import Rate


def judge(fused: dict, eager: dict, golden: dict, *, policy: Policy, prefix: str, seen=None) -> list[Comparison]:
    """One row per result of the reference: fused against eager and the golden (missing/extra results FAIL).
    `seen`: a NaN/Inf probe's promise (how the three are seen, fusecheck/op/probes.py PROPAGATION)."""
    rows = []
    for name, e in eager.items():
        c, g = fused.get(name), golden.get(name)
        if name not in fused:
            rows.append(input_error(prefix + name, "structure_mismatch", f"fused produced no {name} (the reference did)"))
            continue
        if seen is not None and all(isinstance(t, torch.Tensor) for t in (c, e, g)):
            c, e, g = seen(c), seen(e), seen(g)
        rows.append(compare(c, e, g, policy=policy, name=prefix + name, nonfinite_probe=seen is not None))
    rows += [input_error(prefix + n, "structure_mismatch", f"fused produced {n}, the reference did not")
             for n in fused if n not in eager]
    return rows


def _one_run(spec: OpSpec, inputs: dict, dtype: torch.dtype, *, policy, prefix, train: bool, seed: int):
    name = type(spec).__name__
    grads = grad_names(spec, inputs) if train else None
    eager = call(spec.reference, inputs, who=f"{name}.reference", kernel=False)
    cots = cotangents({k: v for k, v in eager.items() if isinstance(v, torch.Tensor)}, seed) if train else None
    if train:
        eager = call(spec.reference, inputs, who=f"{name}.reference", kernel=False, train=grads, cots=cots)
    golden = call(spec.reference, cast(inputs, torch.float64), who=f"{name}.reference (fp64 golden)",
                  kernel=False, train=grads, cots=cots and cast(cots, torch.float64))
    fused = call(spec.fused, inputs, who=f"{name}.fused", kernel=True, train=grads, cots=cots)
    rows = judge(fused, eager, golden, policy=policy, prefix=prefix)
    return settle(rows, fused, eager, golden, dtype=dtype, magnitude=False, policy=policy, prefix=prefix, seen=None,
                  nonfinite_probe=False, rerun=lambda mode: call(spec.reference, inputs, who=f"{name}.reference",
                                                                kernel=False, train=grads, cots=cots))


def _probe(spec: OpSpec, probe: Probe, inputs: dict, dtype: torch.dtype, *, policy, prefix, seed: int):
    name = type(spec).__name__
    changed = apply(probe, inputs, seed)
    if changed is None:
        return []
    golden = call(spec.reference, cast(changed, torch.float64), who=f"{name}.reference (fp64 golden, {probe.name})",
                  kernel=False)
    magnitude = probe.kind == "magnitude"
    if magnitude:
        eager = wide_reference(spec, changed, dtype)
    else:
        eager = call(spec.reference, changed, who=f"{name}.reference ({probe.name})", kernel=False)
    fused = call(spec.fused, changed, who=f"{name}.fused ({probe.name})", kernel=True)
    where = f"{prefix}{probe.name}."
    seen = PROPAGATION[probe.promise] if probe.promise else None
    rows = judge(fused, eager, golden, policy=policy, prefix=where, seen=seen)
    rerun = (lambda mode: wide_reference(spec, changed, dtype)) if magnitude else \
        (lambda mode: call(spec.reference, changed, who=f"{name}.reference ({probe.name})", kernel=False))
    return settle(rows, fused, eager, golden, dtype=dtype, magnitude=magnitude, policy=policy, prefix=where,
                  seen=seen, nonfinite_probe=seen is not None, rerun=rerun)


def _shapes(spec: OpSpec, shapes: list[dict] | None) -> list[dict]:
    chosen = [dict(s) for s in (shapes or getattr(spec, "shapes", None) or [])]
    if not chosen:
        raise SpecError(f"{type(spec).__name__} declares no shapes and none were given (--shape)")
    return chosen


def check_op(spec: OpSpec, *, ref: str = "", dtypes: list[str] | None = None, shapes: list[dict] | None = None,
             repeat: int = 1, train: bool = False, seed: int = 0, policy: Policy | None = None,
             device: str = "cpu", probes: bool = True, requested_rate: float | None = None) -> OpReport:
    """Judge `spec.fused` against `spec.reference` (see the module docstring). Raises SpecError (exit 2) for
    a broken spec and KernelError (exit 3) when `fused` raises; otherwise returns the report."""
    if not isinstance(spec, OpSpec):
        raise SpecError(f"{type(spec).__name__} is not a fusecheck.op.OpSpec (subclass it)")
    if repeat < 1:
        raise SpecError(f"repeat must be >= 1, not {repeat}")
    policy = policy or Policy()
    resolve_device(device)
    dev = torch.device(device)
    names = list(dtypes or spec.dtypes)
    dts = [(d, resolve_dtype(d)) for d in names]
    chosen = _shapes(spec, shapes)
    started = time.monotonic()
    report = OpReport(ref or type(spec).__name__, spec.describe(), [d for d, _ in dts], chosen, repeat, train,
                      seed, device, policy, requested_rate=requested_rate)
    for dname, dtype in dts:
        for shape in chosen:
            key = f"{dname}[{shape_text(shape)}]"
            shown: list[Comparison] | None = None
            failures = 0
            for i in range(repeat):
                inputs = make_inputs(spec, shape, dtype, seed + i, dev)
                rows = _one_run(spec, inputs, dtype, policy=policy, prefix=f"{key}.", train=train, seed=seed + i)
                failed = [r.name for r in rows if not r.passed]
                report.runs.append(RunRecord(dname, shape, i, seed + i, not failed, failed))
                failures += bool(failed)
                if shown is None or (failed and all(r.passed for r in shown)):
                    if i:
                        for r in rows:
                            r.notes.append(f"shown: run {i} of {repeat} (seed {seed + i}), the first that failed")
                    shown = rows
                if i == 0 and probes:
                    for probe in probes_for(spec, inputs):
                        report.probe_rows += _probe(spec, probe, inputs, dtype, policy=policy, prefix=f"{key}.",
                                                    seed=seed)
            report.rows += shown
            report.rates[key] = Rate(failures, repeat, calls=report.calls_per_run)
    report.seconds["total"] = time.monotonic() - started
    return report
