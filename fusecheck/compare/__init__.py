"""The one comparison core: `compare(result, reference, golden)` -> `Comparison` with metrics and a verdict.

Every later capability (toggle matrix, bisector, distributed layers) judges through this function.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fusecheck.compare.cores.torch_core import eager_chunk_elems
from fusecheck.compare.host import to_host
from fusecheck.compare.metrics import METRICS, Metrics, classify_nonfinite, iter_aligned_chunks, pair_metrics
from fusecheck.compare.scale import Applied, metrics_at_scale
from fusecheck.compare.verdict import DIGITS_LOST_DTYPES, RATIO_CHECKS, Status, Verdict, judge
from fusecheck.policy import Policy, Tolerance

__all__ = ["compare", "Comparison", "Metrics", "Verdict", "Status", "METRICS", "RATIO_CHECKS", "pair_metrics",
           "input_error"]


@dataclass
class Comparison:
    name: str
    dtype: str
    shape: tuple[int, ...]
    verdict: Verdict
    vs_reference: Metrics | None = None        # result vs eager
    vs_golden: Metrics | None = None           # result vs golden
    reference_vs_golden: Metrics | None = None  # eager vs golden
    notes: list[str] = field(default_factory=list)
    applied: Applied | None = None  # tolerance and small-value threshold at this tensor's scale

    @property
    def tolerance(self) -> Tolerance | None:
        return None if self.applied is None else self.applied.tolerance

    @property
    def atol_scaled(self) -> bool:
        return self.applied is not None and self.applied.atol_scaled

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    @property
    def error_ratio(self) -> float | None:
        """rmse(result, golden) / rmse(eager, golden): below 1 means compiled is closer to the golden."""
        if self.vs_golden is None or self.reference_vs_golden is None:
            return None
        den = self.reference_vs_golden.rmse
        return self.vs_golden.rmse / den if den else (0.0 if self.vs_golden.rmse == 0 else float("inf"))

    def to_dict(self) -> dict:
        def m(x):
            return None if x is None else x.summary()
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "verdict": self.verdict.to_dict(),
                "error_ratio": self.error_ratio, "vs_eager": m(self.vs_reference), "vs_golden": m(self.vs_golden),
                "eager_vs_golden": m(self.reference_vs_golden), "notes": list(self.notes),
                "applied": None if self.applied is None else {
                    "rtol": self.applied.tolerance.rtol, "atol": self.applied.tolerance.atol,
                    "small_value_threshold": self.applied.small_threshold, "abs_max": self.applied.abs_max},
                "octaves": self.octave_profile()}

    def octave_profile(self) -> dict | None:
        """Eager's and compiled's error against the golden per binary octave of |golden| ([octave, elements,
        max |error|]; octave 0 starts at 2^base): the spread the verdict judged, for the HTML charts."""
        if self.vs_golden is None or self.reference_vs_golden is None or self.applied is None:
            return None
        from fusecheck.compare.metrics import octave_base
        return {"base": octave_base(self.applied.small_threshold),
                "eager": [[i, n, m] for i, (n, m) in self.reference_vs_golden.octaves().items()],
                "compiled": [[i, n, m] for i, (n, m) in self.vs_golden.octaves().items()]}


def input_error(name: str, code: str, message: str, result=None) -> Comparison:
    """A comparison that could not be made; always ERROR or FAIL, never PASS."""
    status = Status.FAIL if code.endswith("_mismatch") else Status.ERROR
    dtype = str(getattr(result, "dtype", type(result).__name__)).removeprefix("torch.")
    shape = tuple(getattr(result, "shape", ()))
    return Comparison(name, dtype, shape, Verdict(status, code, message))


def _any(pred, t: torch.Tensor) -> bool:
    """pred(t).any(), chunk by chunk, stopping at the first hit: an ordinary tensor answers from its first
    chunk, not from a whole-tensor pass (on 2 CPU cores these checks cost as much as the metrics)."""
    return any(bool(pred(c[0]).any()) for c in iter_aligned_chunks([t], eager_chunk_elems(t.device)))


def _structural_check(name: str, result, reference, golden) -> Comparison | None:
    """What can be wrong before any element is read: types, shapes, dtypes, devices, emptiness."""
    if not isinstance(result, torch.Tensor) or not isinstance(reference, torch.Tensor):
        return input_error(name, "type_mismatch",
                           f"expected tensors, got {type(result).__name__} (compiled) and {type(reference).__name__} (eager)",
                           result)
    if result.shape != reference.shape:
        return input_error(name, "shape_mismatch", f"compiled shape {tuple(result.shape)} != eager {tuple(reference.shape)}", result)
    if result.dtype != reference.dtype:
        return input_error(name, "dtype_mismatch", f"compiled dtype {result.dtype} != eager {reference.dtype}", result)
    if result.device != reference.device:
        return input_error(name, "device_mismatch", f"compiled on {result.device}, eager on {reference.device}", result)
    if golden is not None and tuple(golden.shape) != tuple(result.shape):
        return input_error(name, "golden_shape_mismatch",
                           f"golden shape {tuple(golden.shape)} != eager {tuple(result.shape)}: the fp64 model differs", result)
    if result.numel() == 0:
        return input_error(name, "empty", "output is empty (0 elements): nothing to compare, cannot pass", result)
    return None


def _finiteness_check(name: str, result, reference, golden, *, golden_nonfinite: int, golden_nan: int,
                      result_nonfinite: int, numel: int, probe: bool = False,
                      reference_nonfinite: int = -1) -> Comparison | None:
    """No verdict without a finite value. The counts come from the metrics walk itself (each tensor's NaN/Inf
    count is one of its accumulators), so on an accelerator this costs no pass and no synchronisation of its own."""
    if (not probe and golden is not None and golden.is_floating_point() and golden_nonfinite == numel
            and reference_nonfinite == numel and result_nonfinite < numel):
        # eager and the golden agree there is no finite value; compiled made some up: that is a finding
        return input_error(name, "nan_inf_mismatch", f"compiled has {numel - result_nonfinite} finite value(s) where "
                           "eager and the golden have none (all NaN/Inf)", result)
    if not probe and golden is not None and golden.is_floating_point() and golden_nonfinite == numel:
        # no finite value to judge anywhere: an overflow everywhere (exp(1000 x)) is as broken as an all-NaN
        if golden_nan == numel:
            return input_error(name, "golden_all_nan", "golden (fp64) output is all NaN: the model or inputs are "
                               "broken, no verdict is possible", result)
        return input_error(name, "golden_no_finite", "golden (fp64) output has no finite value (all NaN/Inf): "
                           "the model overflows or its inputs are broken, no verdict is possible", result)
    if result.is_floating_point() and result_nonfinite == numel:
        return _no_finite_result(name, result, reference, golden)
    return None


def _complex_finiteness(name: str, result, reference, golden, probe: bool) -> Comparison | None:
    """Complex tensors: an element is finite only when both parts are, which the real view's counts do not
    say; checked on the complex tensors themselves (a pass each, first chunk usually answers)."""
    def nonfinite(t):
        return 0 if _any(torch.isfinite, t) else t.numel()
    return _finiteness_check(name, result, reference, golden, numel=result.numel(), probe=probe,
                             golden_nonfinite=nonfinite(golden) if golden is not None else -1,
                             golden_nan=0 if golden is None or _any(lambda c: ~torch.isnan(c), golden) else golden.numel(),
                             result_nonfinite=nonfinite(result), reference_nonfinite=nonfinite(reference))


def _no_finite_result(name: str, result, reference, golden) -> Comparison:
    """The compiled output holds only NaN/Inf. Only in a NaN/Inf propagation probe (`nonfinite_probe`), where
    the golden is non-finite everywhere too, can positions be judged; otherwise this never passes."""
    if golden is not None and not bool(torch.isfinite(golden).any()):
        pattern = classify_nonfinite(result)
        if bool((pattern == classify_nonfinite(golden.to(result.device))).all()):
            if bool((pattern == classify_nonfinite(reference)).all()):
                return Comparison(name, str(result.dtype).removeprefix("torch."), tuple(result.shape),
                                  Verdict(Status.PASS, "nonfinite_positions_match", "every element is NaN/Inf, "
                                          "as in the golden and eager, at the same positions"))
        return input_error(name, "nan_inf_mismatch", "NaN/Inf positions of compiled differ from the golden's "
                           "(every golden element is NaN/Inf)", result)
    if bool(torch.isfinite(reference).any()):
        return input_error(name, "nan_inf_mismatch", "compiled output has no finite value (all NaN/Inf); "
                           "eager has finite values", result)
    return input_error(name, "no_finite_values", "compiled and eager outputs have no finite value (all "
                       "NaN/Inf): nothing to judge, cannot pass", result)


# 1-byte floats: few CPU/GPU ops accept them (isfinite, abs, where), so they are judged on exact fp32
# copies; tolerance, ULP format and the reported dtype stay theirs.
NARROW_FLOATS = {d for d in (getattr(torch, n, None) for n in dir(torch) if n.startswith("float8"))
                 if isinstance(d, torch.dtype)}


def _as_real(t: torch.Tensor | None) -> torch.Tensor | None:
    """Complex tensors are judged on (real, imag) pairs: casting to a real dtype would drop the imaginary part."""
    return torch.view_as_real(t.resolve_conj()) if t is not None and t.is_complex() else t


def compare(result: torch.Tensor, reference: torch.Tensor, golden: torch.Tensor | None = None, *,
            policy: Policy | None = None, exact: bool = False, exact_reason: str = "", name: str = "output",
            reference_vs_golden: Metrics | None = None, chunk_elems: int | None = None,
            nonfinite_probe: bool = False) -> Comparison:
    """Compare `result` (compiled/fused) with `reference` (eager) and, if given, both with `golden` (fp64).

    `exact=True` demands bitwise equality (data movement). `reference_vs_golden` lets a caller pass a
    precomputed (for example, worst-of-two-runs) eager error instead of recomputing it.
    `nonfinite_probe=True` marks a NaN/Inf propagation probe (NaN/Inf planted in the inputs): a golden with
    no finite value is then judged by positions; elsewhere it is an error (no verdict without a finite value).
    """
    policy = policy or Policy()
    dtype = getattr(result, "dtype", None)  # judged as this dtype, also where the arithmetic runs on a copy
    if dtype in NARROW_FLOATS and getattr(reference, "dtype", None) == dtype:
        result, reference = result.float(), reference.float()  # exact: fp8 -> fp32 loses no bit
    if getattr(golden, "dtype", None) in NARROW_FLOATS:  # the model itself casts to fp8: so does its golden
        golden = golden.float()
    if isinstance(result, torch.Tensor) and isinstance(reference, torch.Tensor) and result.device == reference.device:
        result, reference, golden = to_host(result, reference, golden)  # small ones: cheaper than any launch
    bad = _structural_check(name, result, reference, golden)
    if bad is None and result.is_complex():
        bad = _complex_finiteness(name, result, reference, golden, nonfinite_probe)
        result, reference, golden = _as_real(result), _as_real(reference), _as_real(golden)
    if bad is not None:
        return bad
    judged = result.dtype if dtype.is_complex else dtype  # complex: judged as its real parts
    pairs = {"vs_reference": (result, reference)}
    if golden is not None:
        pairs["vs_golden"] = (result, golden)
        if reference_vs_golden is None:
            pairs["reference_vs_golden"] = (reference, golden)
    metrics, applied = metrics_at_scale(policy, judged, pairs, reference, golden, chunk_elems)
    tol = applied.tolerance
    kwargs = dict(ulp_dtype=judged, rtol=tol.rtol, atol=tol.atol, small_threshold=applied.small_threshold)
    if chunk_elems:
        kwargs["chunk_elems"] = chunk_elems
    vs_ref, vs_g = metrics["vs_reference"], metrics.get("vs_golden")
    bad = _finiteness_check(name, result, reference, golden, numel=int(vs_ref.numel), probe=nonfinite_probe,
                            golden_nonfinite=-1 if vs_g is None else int(vs_g.expected_nonfinite),
                            golden_nan=-1 if vs_g is None else int(vs_g.expected_nan),
                            result_nonfinite=int(vs_ref.actual_nonfinite),
                            reference_nonfinite=int(vs_ref.expected_nonfinite))
    if bad is not None:
        return bad
    ref_g = reference_vs_golden or metrics.get("reference_vs_golden")
    notes = []
    if vs_g is not None and ref_g is not None and ref_g.nonfinite_mismatches and not vs_g.nonfinite_mismatches:
        metrics["vs_golden"], note = _without_eager_blowups(result, reference, golden, kwargs)
        notes.append(note)
    if (judged in DIGITS_LOST_DTYPES and metrics.get("vs_golden") is not None and ref_g is not None
            and metrics["vs_golden"].digits_lost > ref_g.digits_lost):
        metrics["vs_golden"] = _digits_beside_zeros(metrics["vs_golden"], result, golden, judged)
        ref_g = _digits_beside_zeros(ref_g, reference, golden, judged)
    verdict = judge(vs_reference=metrics["vs_reference"], vs_golden=metrics.get("vs_golden"),
                    reference_vs_golden=ref_g, tolerance=tol, policy=policy, exact=exact, exact_reason=exact_reason,
                    dtype=judged, small_threshold=applied.small_threshold, abs_max=applied.abs_max)
    return Comparison(name, str(dtype).removeprefix("torch."), tuple(result.shape), verdict,
                      metrics["vs_reference"], metrics.get("vs_golden"), ref_g, notes=notes, applied=applied)


def _digits_beside_zeros(m: Metrics, x: torch.Tensor, golden: torch.Tensor, dtype: torch.dtype) -> Metrics:
    """`m` with the golden's zeros left out of `digits_lost`: values below the judged dtype's smallest normal
    (exact zeros, or a decision follower's 1e-309) have no digits in that dtype to lose, and a benign compile
    leaves 1e-9 where eager's order cancels to exactly 0 (the small-value checks judge those in absolute
    terms). Counted only when compiled's count exceeds eager's, so a passing check costs no extra pass."""
    from fusecheck.compare.accumulators import EPS
    tiny = torch.finfo(dtype).tiny
    lost_at_zero = 0
    for a, g in iter_aligned_chunks([x, golden.to(x.device)], eager_chunk_elems(x.device)):
        a, g = a.double(), g.double()
        counted = torch.isfinite(a) & torch.isfinite(g) & ((a - g).abs() >= 1e-3 * (g.abs() + EPS))
        lost_at_zero += int((counted & (g.abs() < tiny)).sum())
    values = dict(m.values)
    values["digits_lost"] = max(0.0, values["digits_lost"] - lost_at_zero)
    return Metrics(values)


def _without_eager_blowups(result, reference, golden, kwargs) -> tuple[Metrics, str]:
    """Compiled's error against the golden without the positions where eager is NaN/Inf and the golden finite
    (eager's overflow in a norm at |x| ~ 5e19). Eager's error there is unbounded, so compiled cannot be worse
    there, and eager's own metrics already leave them out: judging compiled's finite error at those positions
    against eager's error elsewhere would fail a kernel for being better. Compiled and golden both read NaN
    there, so the two errors cover the same positions."""
    blown = ~torch.isfinite(reference) & torch.isfinite(golden.to(reference.device))
    k = int(blown.sum())
    masked = pair_metrics(result.masked_fill(blown, float("nan")),
                          golden.masked_fill(blown.to(golden.device), float("nan")), **kwargs)
    return masked, (f"eager is NaN/Inf at {k} position(s) where the golden is finite: its error there is unbounded, "
                    "so those positions are left out of compiled's error too (compiled is finite there)")
