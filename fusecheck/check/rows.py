"""One row per output and gradient: compiled against eager and the golden, with the repeat runs' findings.

The golden of a row may arrive late (a streamed golden hands each parameter gradient over during its
backward pass), so a row is judged the moment its golden exists, and the eager and compiled tensors it
needed are released right after.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fusecheck.check.rolled import Ignoring, RolledDoubt, RolledStats, judge_rolled, rolled_doubt, within_eager_noise
from fusecheck.compare import Comparison, Metrics, Status, Verdict, compare, input_error
from fusecheck.compare.metrics import bitwise_equal
from fusecheck.policy import Policy

# checks that look at a few elements (a largest error), or count elements that each crossed a fixed line
# (digits_lost: relative error >= 1e-3): eager being accurate at those elements is a question of how each was
# computed, which only the per-element noise band answers (fusecheck/check/settle.py). A count is no
# aggregate: elements that share one error source cross the line together (M2M-100, fp32 `--train`: one
# q_proj.weight gradient row whose dq column is a softmax-backward cancellation, all 64 elements at one
# relative error; eager 2.6e-4, compiled 9.4e-4, eight randomised eager runs 6e-6 to 2.3e-3, so eager's
# family crosses with 0 or ~60 elements and its median count says nothing about compiled's 30). The mean
# relative error is an average of those per-element ratios: where eager's family does not clear it, each
# element's relative error is judged against its own band (M2M-100 seed 3, a decoder k_proj.weight gradient
# whose elements all carry one attention-backward scalar's relative error: 16 eager-like runs put the mean
# at 2.4e-6 to 1.4e-4, so a ratio of 2 to their median of 5e-5 is no evidence); RMSE, an absolute average,
# stays with the family
PER_ELEMENT_CHECKS = ("max_rel", "max_abs", "small_value_max_abs", "digits_lost", "mean_rel")


def per_element_only(v: Verdict) -> bool:
    """A golden-check failure from the per-element (max-type) checks alone."""
    return v.code == "worse_than_eager" and bool(v.failed_checks) and all(
        f.split(" ", 1)[0] in PER_ELEMENT_CHECKS for f in v.failed_checks)


def golden_checks_failed(v: Verdict) -> bool:
    """Failed by the checks against the golden (not by structure, non-finite values or exactness): eager's
    error there is one draw, which the settling step replaces by eager's family (settle.py)."""
    return v.code == "worse_than_eager" and bool(v.failed_checks)


@dataclass
class Doubt:
    """A row the golden checks failed against eager's one run: the compiled runs that failed, eager, the
    golden; settled against eager's family and noise band (settle.py)."""
    runs: list[tuple[str, torch.Tensor, Verdict]]  # (which call, its result, its verdict before settling)
    eager: torch.Tensor
    golden: torch.Tensor

EXACT_REASON = "the captured graphs are pure data movement, which must be bitwise equal"


def _worst(a: Metrics, b: Metrics) -> Metrics:
    """Per-metric worst of two eager-vs-golden measurements (cosine: the smaller)."""
    return Metrics({k: (min if k == "cosine" else max)(a.values[k], b.values[k]) for k in a.values})


def _octaves_of_both(own: Metrics, other: Metrics) -> Metrics:
    """Eager's error against its own golden, each octave's largest error taken as the worse of that and
    eager's against compiled's golden. When the goldens differ (each followed its run's near-tied decisions),
    an octave of |golden| holds different elements in each, and an element that is small in compiled's golden
    only is judged against what eager reaches on it too (measured: ResNet bf16 --train seed 1, 4 such weight
    gradient elements)."""
    values = dict(own.values)
    for k, v in other.values.items():
        if k.startswith(("octave_max_abs.", "octave_n.")):
            values[k] = max(values.get(k, 0.0), v)
    return Metrics(values)


@dataclass
class RowJudge:
    """`eager`/`compiled`: first runs' results by name. `eager_noisy`/`compiled_noisy`: names whose repeat
    run's digest differed; `eager_again`/`compiled_again`: a full re-run of those names, when one was made."""

    eager: dict[str, torch.Tensor]
    compiled: dict[str, torch.Tensor]
    policy: Policy
    exact: bool = False
    eager_noisy: set[str] = field(default_factory=set)
    compiled_noisy: set[str] = field(default_factory=set)
    eager_again: dict[str, torch.Tensor] = field(default_factory=dict)
    compiled_again: dict[str, torch.Tensor] = field(default_factory=dict)
    again_call: dict[str, str] = field(default_factory=dict)   # which call a re-run was, if not the second
    ignores_inputs: dict[str, Ignoring] = field(default_factory=dict)  # compiled/ignores_inputs: failed with this
    rolled: dict[str, RolledStats] = field(default_factory=dict)  # the call on other inputs (check/rolled.py)
    rolled_doubts: dict[str, RolledDoubt] = field(default_factory=dict)  # its FAILs, to settle (rolled.py)
    rows: dict[str, Comparison] = field(default_factory=dict)
    # eager's error against a golden of its own (one that followed eager's near-tied decisions where
    # compiled chose differently: fusecheck/golden/choices/), measured in an earlier golden pass
    eager_errors: dict[str, Metrics] = field(default_factory=dict)
    # rows failed by the golden checks, kept to be settled by eager's family and noise band (settle.py)
    doubtful: dict[str, Doubt] = field(default_factory=dict)
    keep_doubts: bool = True
    # compiled results waiting on the host from the repeat run on (fusecheck/runs/park.py), with the device each
    # came from: it goes back there when its row is judged (a result on the wrong device still reads as such)
    parked: dict[str, torch.device] = field(default_factory=dict)

    def measure_eager(self, name: str, golden: torch.Tensor | None) -> None:
        """Sink of a golden pass that only measures eager's error (the row is judged in a later pass)."""
        e1 = self.eager.get(name)
        if e1 is None or golden is None or not (e1.is_floating_point() or e1.is_complex()):
            return
        err = self._eager_error(name, e1, golden.to(e1.device), always=True)
        if err is not None:
            self.eager_errors[name] = err

    def _eager_error(self, name: str, e1: torch.Tensor, g: torch.Tensor, always: bool = False) -> Metrics | None:
        """Eager against the golden, the worse of two runs when eager is not repeatable; None: left to
        `compare` (a repeatable eager, unless `always`)."""
        e2 = self.eager_again.get(name)
        if name in self.eager_noisy and e2 is not None and e1.shape == g.shape:
            both = compare(e2, e1, g, policy=self.policy, name=name)
            if both.vs_golden is not None:
                return _worst(both.vs_golden, both.reference_vs_golden)
        return compare(e1, e1, g, policy=self.policy, name=name).vs_golden if always else None

    def judge(self, name: str, golden: torch.Tensor | None) -> None:
        e1, c1 = self.eager.pop(name, None), self.compiled.pop(name, None)
        if e1 is None:
            return  # not a result of eager: nothing to judge it against
        if name in self.parked and c1 is not None:
            c1 = c1.to(self.parked[name])
        self.rows[name] = self._row(name, e1, c1, golden)

    def _row(self, name: str, e1: torch.Tensor, c1: torch.Tensor | None, g: torch.Tensor | None) -> Comparison:
        if c1 is None:
            return input_error(name, "structure_mismatch", f"compiled produced no {name} (eager did)", e1)
        if not (e1.is_floating_point() or e1.is_complex()) and not _discrete_golden(g, e1):
            g = None  # integers and bools without a golden of their own kind are compared exactly against eager
        if g is not None and g.device != e1.device:
            g = g.to(e1.device)
        noisy = name in self.eager_noisy
        ref_g = self.eager_errors.get(name)
        if ref_g is not None and g is not None and e1.shape == g.shape:
            against_compiled_golden = compare(e1, e1, g, policy=self.policy, name=name).vs_golden
            if against_compiled_golden is not None:
                ref_g = _octaves_of_both(ref_g, against_compiled_golden)
        elif g is not None:
            ref_g = self._eager_error(name, e1, g)
        # Only forward outputs of a movement graph must be exact: the backward of expand/broadcast is a sum.
        exact = self.exact and name.startswith("output")
        row = compare(c1, e1, g, policy=self.policy, exact=exact, name=name, reference_vs_golden=ref_g,
                      exact_reason=EXACT_REASON if exact else "")
        judged = [("first", c1, row.verdict)]
        if noisy:
            row.notes.append("eager is not bitwise repeatable: judged against the worse of two eager runs")
        if row.vs_reference is not None and name in self.compiled_noisy:
            row = self._judge_second_run(row, name, c1, e1, g, ref_g, exact, noisy, judged)
        self._doubt(name, judged, e1, g)
        # a row that already fails keeps its own finding (a dtype, shape or device mismatch says more)
        ignoring = self.ignores_inputs.get(name) if row.passed else None
        if ignoring is not None and not within_eager_noise(ignoring, row.reference_vs_golden, self.policy):
            row.verdict = Verdict(Status.FAIL, "ignores_inputs", ignoring.message)
            return row
        if ignoring is not None:
            row.notes.append(f"compiled gave the first call's bits on the rolled inputs, where eager moved by up to "
                             f"{ignoring.move:.3g}: within the RMSE check's ratio times its own largest error against "
                             "the golden, no evidence that the result should have changed")
        if name in self.rolled:
            doubt = rolled_doubt(row, self.rolled[name], c1, e1, self.policy)
            failed = judge_rolled(doubt, self.policy) if doubt is not None else None
            if failed is not None:
                # a FAIL on an estimate of eager's error there: settled with it measured (rolled.settle_rolled)
                self.rolled_doubts[name] = doubt
                row.verdict = failed
        return row

    def _doubt(self, name: str, judged, e1: torch.Tensor, g: torch.Tensor | None) -> None:
        failing = [run for run in judged if not run[2].passed]
        if self.keep_doubts and g is not None and failing and all(golden_checks_failed(v) for _, _, v in failing):
            self.doubtful[name] = Doubt(failing, e1, g)

    def _judge_second_run(self, row: Comparison, name, c1, e1, g, ref_g, exact, eager_noisy: bool,
                          judged: list) -> Comparison:
        """Every compiled run is judged: a second run whose bits differ is compared with the golden like the
        first, and a run that fails fails the row whichever call it was (the row then shows that run)."""
        label = self.again_call.get(name, "second")
        msg = f"compiled output changed between two runs with the same inputs ({self._changed(c1, name)})"
        if label != "second":
            msg += f"; the {label} call differs from the first"
        again = self._second_run_judged(name, c1, e1, g, ref_g, exact)
        if again is not None:
            judged.append((label, self.compiled_again[name], again.verdict))
        failing = [(call, r) for call, r in (("first", row), (label, again)) if r is not None and not r.passed]
        if failing:
            call, shown = failing[-1] if row.passed else failing[0]
            v = shown.verdict
            calls = " and ".join(c for c, _ in failing)
            if eager_noisy:  # eager moves too: the finding is the failing run's own
                code, why = v.code, f"{msg}; eager is nondeterministic too"
            else:
                code, why = "nondeterministic_compiled", msg + "; eager is repeatable"
            shown.verdict = Verdict(Status.FAIL if v.status is Status.PASS else v.status, code,
                                    f"{why}; the {calls} compiled call{'s' if len(failing) > 1 else ''} "
                                    f"failed ({call}: {v.code}: {v.message})", v.failed_checks, v.margins)
            if shown is again:
                again.notes = row.notes + again.notes
            return shown
        if again is not None:
            # e.g. atomic adds in an embedding backward: the bits move, the accuracy does not
            eager_is = "nondeterministic too" if eager_noisy else "repeatable"
            row.notes.append(msg + f"; eager is {eager_is}, but both compiled runs are judged against the golden "
                             f"and neither is worse than eager ({label} run: {again.verdict.code})")
        elif eager_noisy:
            row.notes.append(msg + "; eager is nondeterministic too")
        else:  # no golden to judge the second run against (an integer result): it differs from eager's bits
            row.verdict = Verdict(Status.FAIL, "nondeterministic_compiled", msg + "; eager is repeatable")
        return row

    def _second_run_judged(self, name, c1, e1, g, ref_g, exact) -> Comparison | None:
        """The full re-run of a nondeterministic compiled result, judged like the first (None: no golden or
        the re-run happened to repeat the first run's bits, so there is nothing more to judge)."""
        c2 = self.compiled_again.get(name)
        if g is None or not isinstance(c2, torch.Tensor) or c2.shape != c1.shape or c2.dtype != c1.dtype:
            return None
        return compare(c2, e1, g, policy=self.policy, exact=exact, name=name, reference_vs_golden=ref_g,
                       exact_reason=EXACT_REASON if exact else "")

    def _changed(self, c1: torch.Tensor, name: str) -> str:
        c2 = self.compiled_again.get(name)
        if isinstance(c2, torch.Tensor) and c2.shape == c1.shape and c2.dtype == c1.dtype:
            n = c1.numel() - bitwise_equal(c1, c2)
            if n:
                return f"{n} elements"
        return "its bit digest differed"


def _discrete_golden(g: torch.Tensor | None, e1: torch.Tensor) -> bool:
    """The golden run's integer/bool result where it has eager's shape and kind: judged against, an element
    where eager differs from it follows a near-tie of floats (compare's `follows_float_ties`)."""
    return (isinstance(g, torch.Tensor) and g.shape == e1.shape and not (g.is_floating_point() or g.is_complex())
            and (g.dtype == torch.bool) == (e1.dtype == torch.bool))
