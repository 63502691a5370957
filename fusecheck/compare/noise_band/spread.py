"""eager_spread: K perturbed eager runs of a case, each kept as its difference from eager, per result."""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterable

import torch
from torch.utils import _pytree as pytree

from fusecheck.case import Case
from fusecheck.runs.execute import StateSnapshot, restore_state, run_once, state_snapshot
from fusecheck.compare.noise_band.rounding import PERTURBED_DTYPES, RandomRounding, flip_last_bits

# --- eager_spread ---------------------------------------------------------------------------------------

def perturbed_run_seed(seed: int, k: int, salt: int = 0) -> int:
    """The generator seed of the k-th randomised run drawn from `seed` (`salt` keeps other series of runs,
    from the same seed, apart): every caller of RandomRounding draws its runs' seeds here."""
    return (int(seed) * 1_000_003 + (k + 1) * 7_919 + salt) & 0x7FFF_FFFF


class Spread(dict):
    """name -> per-element spread (max over `runs` perturbed eager runs of |perturbed - eager|, fp32 of the
    result's shape). `runs` is K, which the null model of `judge_band` needs; `seconds` the wall time of the
    reference run and of the perturbed runs; `notes` what the report should say.

    `first`/`rest` (bf16, same shapes; only when K >= 2): the first run's |perturbed - eager| and the max over
    the others. They let `judge_band` measure c without selection bias: elements are selected on `first`
    (their noise is resolved) and c is read from `rest` / |eager - golden|, which the selection did not see.
    `calibration(name)` is the pair to pass as judge_band's `calibration`."""

    def __init__(self, *args, runs: int = 0, how: str = "ops", **kw):
        super().__init__(*args, **kw)
        self.runs, self.how = runs, how
        self.seconds: dict[str, float] = {}
        self.notes: list[str] = []
        self.pinned = 0
        self.first: dict[str, torch.Tensor] = {}
        self.rest: dict[str, torch.Tensor] = {}
        # name -> each perturbed run's signed difference from eager (fp32), kept when asked (`keep_runs`):
        # the settling step turns them into whole eager-like runs for the aggregate checks (settle.py)
        self.diffs: dict[str, list[torch.Tensor]] = {}

    def calibration(self, name: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        if name in self.first and name in self.rest:
            return self.first[name], self.rest[name]
        return None

    def merged(self, more: "Spread") -> "Spread":
        """This spread and `more` (further runs of the same eager, other seeds) as one of `runs` + `more.runs`
        runs, on the names both have: the max of the spreads, every run's difference, and the calibration pair
        with `more`'s runs among the others (the first run stays the one elements are selected on)."""
        out = Spread(runs=self.runs + more.runs, how=self.how)
        out.seconds = {k: self.seconds.get(k, 0.0) + more.seconds.get(k, 0.0) for k in {*self.seconds, *more.seconds}}
        out.notes, out.pinned = [*self.notes, *(n for n in more.notes if n not in self.notes)], self.pinned + more.pinned
        for name in self.keys() & more.keys():
            if self[name].shape != more[name].shape:
                continue
            out[name] = torch.maximum(self[name], more[name])
            out.diffs[name] = [*self.diffs.get(name, []), *more.diffs.get(name, [])]
            cal = self.calibration(name)
            if cal is not None:
                out.first[name] = cal[0]
                out.rest[name] = torch.maximum(cal[1], more[name].to(cal[1].dtype))
        return out


def _floating(results: dict[str, torch.Tensor], names: Iterable[str] | None) -> dict[str, torch.Tensor]:
    keep = set(names) if names is not None else None
    return {k: v for k, v in results.items() if isinstance(v, torch.Tensor) and v.is_floating_point()
            and (keep is None or k in keep)}


def _inputs_perturbed(fn: Callable, case: Case, gen: torch.Generator, dtype) -> Callable:
    """`fn` whose floating inputs and module parameters/buffers are each moved by one ulp at random
    (probability 1/2, either way) before the call: run_once resets the state to its snapshot every run."""
    dtypes = PERTURBED_DTYPES if dtype is None else (dtype,)

    def moved(x):
        if not isinstance(x, torch.Tensor) or x.dtype not in dtypes:
            return x
        y = x.detach().clone()
        flip_last_bits(y, gen, 0.25)
        return x + (y - x.detach()) if x.requires_grad else y

    def call(*args, **kwargs):
        if isinstance(case.model, torch.nn.Module):
            with torch.no_grad():
                for t in list(case.model.parameters()) + list(case.model.buffers()):
                    if t.dtype in dtypes:
                        flip_last_bits(t.data, gen, 0.25)
        return fn(*pytree.tree_map(moved, args), **pytree.tree_map(moved, kwargs))
    return call


def eager_spread(model_fn: Callable, case: Case, *, runs: int = 4, train: bool = False,
                 cotangents: dict[str, torch.Tensor] | None = None, state: StateSnapshot | None = None,
                 names: Iterable[str] | None = None, seed: int = 0, dtype: torch.dtype | None = None,
                 eager: dict[str, torch.Tensor] | None = None, pin_decisions: bool = True,
                 reassociate: bool = True, flip: float = 0.125, how: str = "ops",
                 keep_runs: bool | None = None, decompose: bool = True, first_run: int = 0) -> Spread:
    """Per-element rounding-noise spread of eager: `runs` (K) extra runs of `fusecheck.runs.execute.run_once(
    model_fn, case, train=..., cotangents=..., state=...)` under `RandomRounding` (module docstring), each
    result's spread = max over the K runs of |perturbed - eager|.

    `eager`: the caller's eager results by name (`RunResult.all(...)`); the differences are taken from them.
    Otherwise, and always when `pin_decisions` (the default), one reference run under the mode with nothing
    perturbed records the decisions and is the baseline when `eager` is None (K + 1 runs in all; K when
    `pin_decisions=False` and `eager` is given). `names`: the results to keep (None: every floating output,
    gradient and mutated input/state). `cotangents`: the backward's (eager's; made from `seed` like run_once
    when None, and reused by every run). `state`: the module state every run starts from (a snapshot is
    taken when None). `seed`: the perturbations' own generators (never the process's RNG). `dtype`: only
    outputs of that dtype are perturbed (None: fp16/bf16/fp32). `how="inputs"`: perturb the floating inputs
    and parameters by their last bit instead of the ops (an alternative to compare; needs parameters small
    enough to be snapshot). `keep_runs`: keep each run's signed difference from eager in `Spread.diffs`
    (None: when `names` is given, i.e. for the few rows a caller asked about). `decompose`: composite ops run
    as their decompositions (`RandomRounding`; False: output rounding only, for comparison). `first_run`: the
    index of the first run's seed, so that more runs of the same series (`Spread.merged`) draw other seeds."""
    if runs < 1:
        raise ValueError("eager_spread needs at least one perturbed run")
    if how not in ("ops", "inputs"):
        raise ValueError(f"how must be 'ops' or 'inputs', not {how!r}")
    state = state if state is not None else state_snapshot(case)
    kw = dict(runs=runs, train=train, cotangents=cotangents, state=state, names=names, seed=seed, dtype=dtype,
              eager=eager, pin_decisions=pin_decisions, reassociate=reassociate, flip=flip, how=how,
              keep_runs=names is not None if keep_runs is None else keep_runs, first_run=first_run)
    try:
        try:
            return _spread(model_fn, case, decompose=decompose, **kw)
        except Exception as e:  # noqa: BLE001 -- a decomposition this model's ops do not take: output rounding only
            if not decompose or how != "ops":
                raise
            restore_state(case, state)
            out = _spread(model_fn, case, decompose=False, **kw)
            out.notes.append(f"composite ops could not run as their decompositions under the randomised rounding "
                             f"({type(e).__name__}: {str(e)[:200]}): their outputs were rounded, not their insides")
            return out
    finally:
        restore_state(case, state)  # the model is left as eager left it, not as a perturbed run did


def _spread(model_fn, case, *, runs, train, cotangents, state, names, seed, dtype, eager, pin_decisions,
            reassociate, flip, how, keep_runs=False, decompose=True, first_run=0) -> Spread:
    out = Spread(runs=runs, how=how)
    recording = None
    t0 = time.perf_counter()
    if pin_decisions and how == "ops" or eager is None:
        record = pin_decisions and how == "ops"
        mode = RandomRounding(seed, perturb=False, record=True, decompose=decompose) if record else None
        with mode if mode is not None else contextlib.nullcontext():
            ref = run_once(model_fn, case, train=train, cotangents=cotangents, seed=seed, state=state)
        cotangents = ref.cotangents if cotangents is None else cotangents
        recording = mode.recording if mode is not None else None
        ref_results = _floating(ref.all(tuple(ref.after)), names)
        if eager is not None:
            base = _floating(eager, names)
            moved = [k for k in base if k in ref_results and not torch.equal(base[k], ref_results[k])]
            if moved and mode is not None and mode.decomposed_ops:
                out.notes.append(f"{mode.decomposed_ops} call(s) of composite ops (norms, softmax, their backwards) "
                                 "ran as Inductor's decompositions in the randomised-rounding runs, as a compiler runs "
                                 "them: the spread, measured from eager, includes that reordering")
            elif moved:
                out.notes.append(f"the reference run under the mode differs from eager on {len(moved)} result(s) "
                                 f"(eager is not repeatable, or an op behaves differently under a dispatch mode)")
        else:
            base = ref_results
        del ref, ref_results
    else:
        base = _floating(eager, names)
    out.seconds["reference"] = time.perf_counter() - t0
    if recording:
        out.notes.append(f"{len(recording)} discrete decision(s) pinned to eager's choice in every perturbed run")
    t1 = time.perf_counter()
    spreads: dict[str, torch.Tensor] = {}
    broken = set()
    for k in range(runs):
        run_seed = perturbed_run_seed(seed, first_run + k, int(how == "inputs"))
        if how == "ops":
            mode = RandomRounding(run_seed, flip=flip, reassociate=reassociate, replay=recording, dtype=dtype,
                                  decompose=decompose)
            with mode:
                res = run_once(model_fn, case, train=train, cotangents=cotangents, seed=seed, state=state)
            out.pinned += mode.pinned
            if mode.replay_broken:
                broken.add(mode.replay_broken)
        else:
            gen = torch.Generator().manual_seed(run_seed)
            res = run_once(_inputs_perturbed(model_fn, case, gen, dtype), case, train=train,
                           cotangents=cotangents, seed=seed, state=state)
        results = res.all(tuple(res.after))
        del res
        for name, b in base.items():
            p = results.get(name)
            if not isinstance(p, torch.Tensor) or p.shape != b.shape:
                continue
            signed = p.double() - b.double()
            signed = torch.where(torch.isnan(signed), torch.zeros((), dtype=signed.dtype, device=signed.device),
                                 signed)
            if keep_runs:
                out.diffs.setdefault(name, []).append(signed.float())
            d = signed.abs().float()
            spreads[name] = d if name not in spreads else torch.maximum(spreads[name], d)
            if runs >= 2:
                if k == 0:
                    out.first[name] = d.to(torch.bfloat16)
                else:
                    d16 = d.to(torch.bfloat16)
                    out.rest[name] = d16 if name not in out.rest else torch.maximum(out.rest[name], d16)
        del results
    out.seconds["perturbed"] = time.perf_counter() - t1
    if broken:
        out.notes.append("decisions could not be pinned in every run (" + "; ".join(sorted(broken)) +
                         "): the spread there may include routing changes, which only widens the band")
    out.update(spreads)
    return out
