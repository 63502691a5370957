"""The per-element noise band (fusecheck/compare/noise_band.py, issue 27 item 4): eager's rounding noise
measured by randomised-rounding runs, and a significance rule over elements with a derived null model.

Real computations (a tiny attention block, a Linear, a per-channel scale) run through
`fusecheck.runs.execute.run_once` in eager, in a different but correct op order (the stand-in for a compiler),
and in fp64; planted bugs are applied to the compiled side's results."""
import math

import pytest
import torch

from fusecheck.case import Case
from fusecheck.compare import compare
from fusecheck.compare.noise_band import (RandomRounding, binom_sf, eager_spread, judge_band, null_tail,
                                          octave_reference, smallest_failing_count)
from fusecheck.runs.execute import run_once, state_snapshot
from fusecheck.runs.cast import golden_case


def _gen(seed):
    return torch.Generator().manual_seed(seed)


class Attn(torch.nn.Module):
    """x + pos -> Linear qkv (bias) -> softmax attention -> out proj. `variant` 0 is eager (HF-style explicit
    attention: scale after the scores, addmm Linears); 1 is a different but correct order (q pre-scaled,
    biases added after the matmul, softmax in fp32), the stand-in for a compiled graph."""

    def __init__(self, d=32, heads=2, seq=16):
        super().__init__()
        self.heads, self.variant = heads, 0
        self.pos = torch.nn.Parameter(torch.randn(seq, d) * 0.5)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)

    def _lin(self, lin, h):
        return h @ lin.weight.t() + lin.bias if self.variant == 1 else lin(h)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self._lin(self.qkv, x + self.pos).split(d, -1)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        scale = 1 / math.sqrt(d // self.heads)
        if self.variant == 1:
            a = ((q * scale) @ k.transpose(-1, -2)).float().softmax(-1).to(q.dtype) @ v
        else:
            a = ((q @ k.transpose(-1, -2)) * scale).softmax(-1) @ v
        return self._lin(self.out, a.transpose(1, 2).reshape(b, t, d))


def _three_runs(case, *, train=True, seed=0, runs=4, variant_attr=None):
    """eager, the alternative order ("compiled"), golden results by name, and eager's spread."""
    state = state_snapshot(case)
    eager = run_once(case.model, case, train=train, seed=seed, state=state)
    gcase = golden_case(case, torch.float64)
    golden = run_once(gcase.model, gcase, train=train, cotangents=eager.cotangents)
    if variant_attr:
        setattr(case.model, variant_attr, 1)
    compiled = run_once(case.model, case, train=train, cotangents=eager.cotangents, state=state)
    if variant_attr:
        setattr(case.model, variant_attr, 0)
    spread = eager_spread(case.model, case, runs=runs, train=train, cotangents=eager.cotangents, state=state,
                          seed=seed)
    return eager.all(), compiled.all(), golden.all(), spread


def _judge(compiled, e, g, spread, name, **kw):
    """judge_band as the integration calls it: the spread of that result and its calibration pair."""
    return judge_band(compiled, e[name], g[name], spread[name], runs=spread.runs,
                      calibration=spread.calibration(name), **kw)


def _attn_case(seed, dtype, batch=2, **kw):
    torch.manual_seed(seed)
    model = Attn(**kw).to(dtype).eval()
    return Case(model, (torch.randn(batch, kw.get("seq", 16), kw.get("d", 32)).to(dtype),), "attn")


# ---- the null model ------------------------------------------------------------------------------------

def test_the_null_tail_is_the_simulated_one_and_falls_as_the_power_k_plus_1():
    n, k, r, c = 400_000, 4, 2.0, 1.3
    x = r * torch.randn(n, generator=_gen(0), dtype=torch.float64).abs()
    y = torch.randn(n, k + 1, generator=_gen(1), dtype=torch.float64).abs()
    y[:, 1:] *= c
    z = x / y.max(1).values
    for t in (2.0, 4.0, 8.0, 16.0):
        p = float(null_tail([t], runs=k, ratio=r, c=c))
        hits = float((z > t).sum())
        assert abs(hits - n * p) < 4 * math.sqrt(n * p) + 2, (t, hits, n * p)
    p = null_tail([1e3, 2e3], runs=k, ratio=r, c=c)
    assert float(p[0] / p[1]) == pytest.approx(2 ** (k + 1), rel=1e-3)  # ~ A (r/T)^(K+1) / c^K
    assert float(null_tail([math.inf], runs=k)) == 0.0


def test_binomial_limits():
    assert binom_sf(0, 10, 0.1) == 1.0 and binom_sf(11, 10, 0.1) == 0.0
    assert binom_sf(3, 10, 0.1) == pytest.approx(1 - sum(math.comb(10, i) * 0.1**i * 0.9**(10 - i)
                                                        for i in range(3)), rel=1e-9)
    assert smallest_failing_count(1_000_000, 1e-15, 1e-7) == 1  # n p0 below the level: a lone element decides
    assert smallest_failing_count(1_000_000, 1e-12, 1e-7) == 2
    k = smallest_failing_count(10_000, 0.01, 1e-7)
    assert binom_sf(k, 10_000, 0.01) < 1e-7 <= binom_sf(k - 1, 10_000, 0.01)


def _null_draws(n, seed, *, k=4, c=1.5, rho=2.0, dtype=torch.float32):
    """A correct computation under the null: element scales over six decades, eager one draw, each
    perturbed run one draw of c times that scale, compiled rho times it; golden of order 1."""
    g = torch.randn(n, generator=_gen(seed), dtype=torch.float64).sign() * (1 + torch.rand(n, generator=_gen(seed + 1),
                                                                                               dtype=torch.float64))
    s = 10 ** (-6 + 5 * torch.rand(n, generator=_gen(seed + 2), dtype=torch.float64))
    eager = g + s * torch.randn(n, generator=_gen(seed + 3), dtype=torch.float64)
    runs = c * s.unsqueeze(1) * torch.randn(n, k, generator=_gen(seed + 4), dtype=torch.float64).abs()
    compiled = g + rho * s * torch.randn(n, generator=_gen(seed + 5), dtype=torch.float64)
    return compiled, eager, g, runs.amax(1), (runs[:, 0], runs[:, 1:].amax(1))


def _null_judged(n, seed, **kw):
    c, e, g, spread, cal = _null_draws(n, seed, **{k: kw.pop(k) for k in ("rho",) if k in kw})
    return judge_band(c, e, g, spread, runs=4, dtype=torch.float32, calibration=cal, **kw)


def test_the_false_alarm_rate_under_the_null_is_at_most_alpha():
    """At a testable alpha (0.05) over 200 tensors drawn from the null at its worst (compiled exactly r times
    eager's scale), with c measured from the data: the rule fails at most alpha-ish of them."""
    fails = sum(not _null_judged(1000, 10 * s, alpha=0.05).passed for s in range(200))
    assert fails <= 0.05 * 200 + 3 * math.sqrt(0.05 * 200)


def test_a_correct_computation_over_millions_of_elements_stays_quiet():
    r = _null_judged(2_000_000, 7)
    assert r.passed, r.message
    assert 1.45 < r.stats["c"] <= 1.5 and r.stats["calibrated_on"] > 100_000  # measured (a subsample), from below
    assert _null_judged(2_000_000, 7, calibrate=False).stats["c"] == 1.0
    assert 0 < r.margin < 1


@pytest.mark.parametrize("planted", ["systematic", "few", "lone"])
def test_the_rule_catches_what_the_null_does_not_give(planted):
    c, e, g, s, cal = _null_draws(100_000, 3, rho=1.0)
    scale = (e - g).abs().median()
    if planted == "systematic":  # every element 3x eager's noise (the null allows 2x)
        c = g + 3.0 * (c - g)
    elif planted == "few":       # 5 elements 50x their noise
        c[:5] = g[:5] + 50 * s[:5]
    else:                        # one element far beyond: n p0(z) < alpha
        c[0] = g[0] + 1e4 * s[0]
    r = judge_band(c, e, g, s, runs=4, dtype=torch.float32, calibration=cal)
    assert not r.passed and r.margin > 1, (planted, r.message, scale)


def test_nan_where_eager_and_golden_are_finite_fails_and_nonfinite_goldens_are_left_out():
    g = torch.randn(1000, generator=_gen(0), dtype=torch.float64)
    e = g.float()
    c = e.clone()
    c[5] = float("nan")
    r = judge_band(c, e, g, None, runs=0)
    assert not r.passed and "NaN/Inf" in r.message and r.stats["argmax"] == 5
    g2, e2 = g.clone(), e.clone()
    g2[5], e2[5] = float("inf"), float("inf")
    r = judge_band(c, e2, g2, None, runs=0)
    assert r.passed and r.stats["excluded_nonfinite"] == 1 and r.stats["n"] == 999


# ---- the mode ------------------------------------------------------------------------------------------

def test_the_mode_perturbs_only_inexact_floating_ops_by_one_ulp_and_runs_in_backward():
    x = torch.randn(4096, generator=_gen(0))
    y = torch.randn(4096, generator=_gen(1))
    ints = (x * 1000).long()

    def exact_ops():
        return [torch.cat([x, y]), x.clone(), x.relu(), -x, x.abs(), x.view(64, 64).t(), torch.where(x > 0, x, y),
                x.double(), x.max(), (ints + 3).cumsum(0), x.argmax(), x > y]
    with RandomRounding(0, flip=0.5):  # flip 0.5 each way: every element of every perturbed op moves
        s = x + y
        exact = exact_ops()
    ref = x + y
    up = torch.nextafter(ref, torch.full_like(ref, math.inf))
    down = torch.nextafter(ref, torch.full_like(ref, -math.inf))
    assert bool(((s == up) | (s == down)).all())  # every sum moved by exactly one ulp, either way
    assert 0.45 < float((s == up).float().mean()) < 0.55
    for a, b in zip(exact, exact_ops()):  # exact ops, integer and bool ops: untouched
        assert a.dtype == b.dtype and torch.equal(a, b)
    # backward: autograd's engine runs the backward ops under the mode too (CPU: on the calling thread)
    w = torch.randn(64, 64, generator=_gen(2), requires_grad=True)
    inp = torch.randn(8, 64, generator=_gen(3))
    mode = RandomRounding(1)
    with mode:
        out = (inp @ w).tanh().sum()
        before = mode.flipped_ops
        out.backward()
    assert mode.flipped_ops > before
    w2 = w.detach().clone().requires_grad_()
    (inp @ w2).tanh().sum().backward()
    assert not torch.equal(w.grad, w2.grad)
    assert float((w.grad - w2.grad).abs().max()) < 1e-5 * float(w2.grad.abs().max())


def test_reductions_are_reassociated_over_their_own_dims_only():
    """A reduction's reduced dims come from its schema's `dim` (logsumexp's default overload has one): the
    result moves by accumulation error only, never by a permuted output index."""
    x = torch.randn(8, 512, 3, generator=_gen(0))
    for op in (lambda t: t.logsumexp(1), lambda t: torch.var_mean(t, 1)[0], lambda t: t.std(1), lambda t: t.sum((0, 1))):
        with RandomRounding(0, flip=0.0):
            moved = op(x)
        assert torch.allclose(moved, op(x), rtol=1e-5, atol=1e-6)


def _offset_layer_norm_case(seed):
    """A layer norm of rows offset by 300 (a residual stream's common mode): each row's mean carries a
    rounding error ~u * 300 that moves every element of the row alike, ~1000x an output rounding."""
    torch.manual_seed(seed)
    ln = torch.nn.LayerNorm(256)
    return Case(ln, (300 + torch.randn(64, 256),), "ln")


@pytest.mark.parametrize("seed", range(3))
def test_composite_ops_run_decomposed_so_a_row_mean_error_is_in_the_band(seed):
    """Composite ops run as the compiler's decomposition in the perturbed runs. A correct other computation of
    the layer norm (its decomposition in another order: what a fused kernel does) is within that band; with
    output rounding only, the band fails it at ~100x. A mean accumulated in bf16 still fails."""
    case = _offset_layer_norm_case(seed)
    eager = run_once(case.model, case).all()
    gcase = golden_case(case, torch.float64)
    golden = run_once(gcase.model, gcase).all()
    mode = RandomRounding(1000 + seed, flip=0.0)
    with mode:
        reordered = run_once(case.model, case).all()["output"]
    assert mode.decomposed_ops == 1 and mode.reassociated_ops >= 1
    x, ln = case.inputs[0], case.model
    mean16 = x.bfloat16().float().mean(-1, keepdim=True).bfloat16().float()
    bad = (x - mean16) * torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + ln.eps) * ln.weight + ln.bias
    for decompose, correct_passes in ((True, True), (False, False)):
        spread = eager_spread(case.model, case, runs=8, eager=eager, decompose=decompose, seed=seed)
        ok = _judge(reordered, eager, golden, spread, "output")
        assert ok.passed == correct_passes, (decompose, ok.message)
        assert not _judge(bad.detach(), eager, golden, spread, "output").passed
    assert any("decompositions" in n for n in spread.notes) is False  # decompose=False: no such note


def test_a_decomposition_that_raises_falls_back_to_output_rounding(monkeypatch):
    """A composite op whose decomposition fails under the mode is the tool's problem: the band is measured with
    output rounding only, and the note says so."""
    from fusecheck.compare.noise_band import rounding

    def broken(*args, **kwargs):
        raise RuntimeError("this decomposition does not take these arguments")
    monkeypatch.setattr(rounding, "composite_decompositions",
                        lambda: {torch.ops.aten.native_layer_norm.default: broken})
    case = _offset_layer_norm_case(0)
    eager = run_once(case.model, case).all()
    spread = eager_spread(case.model, case, runs=2, eager=eager)
    assert spread["output"].shape == eager["output"].shape and float(spread["output"].max()) > 0
    assert any("could not run as their decompositions" in n for n in spread.notes), spread.notes


def test_eager_spread_leaves_the_process_rng_alone_and_its_reference_is_eager():
    case = _attn_case(0, torch.bfloat16)
    state = state_snapshot(case)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    eager = run_once(case.model, case, train=True, seed=0, state=state)
    spread = eager_spread(case.model, case, runs=3, train=True, cotangents=eager.cotangents, state=state,
                          eager=eager.all(), seed=5)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert not spread.notes or "differs from eager" not in " ".join(spread.notes)  # the mode is transparent
    assert spread.runs == 3 and set(spread) == {k for k, v in eager.all().items() if v.is_floating_point()}
    assert all(v.shape == eager.all()[k].shape and bool((v >= 0).all()) for k, v in spread.items())
    assert all(float(v.max()) > 0 for v in spread.values())
    again = eager_spread(case.model, case, runs=3, train=True, cotangents=eager.cotangents, state=state, seed=5)
    assert all(torch.equal(again[k], spread[k]) for k in spread)  # reproducible from its own seed
    params = {k: v.detach().clone() for k, v in case.model.named_parameters()}
    moved = eager_spread(case.model, case, runs=2, train=True, cotangents=eager.cotangents, state=state,
                         how="inputs")  # the alternative: inputs and parameters moved by their last bit
    assert all(torch.equal(v, params[k]) for k, v in case.model.named_parameters())  # and put back
    assert torch.equal(torch.random.get_rng_state(), before) and float(moved["grad.qkv.bias"].max()) > 0


class Router(torch.nn.Module):
    """Top-1 routing over 4 experts whose scores tie in pairs (duplicated columns): eager's choice is its
    tie-break, and any rounding noise would flip it."""

    def __init__(self):
        super().__init__()
        w = torch.randn(16, 2)
        self.w = torch.nn.Parameter(torch.cat([w, w], 1))

    def forward(self, x):
        scores = x @ self.w
        top = scores.topk(1, -1).indices
        return (x.unsqueeze(1) * (top.unsqueeze(-1) + 1)).sum(1), scores.argmax(-1)


def test_decisions_are_pinned_to_eager_choices():
    torch.manual_seed(0)
    case = Case(Router(), (torch.randn(256, 16) * 3,), "router")
    eager = run_once(case.model, case)
    pinned = eager_spread(case.model, case, runs=3, seed=1)
    free = eager_spread(case.model, case, runs=3, seed=1, pin_decisions=False)
    out = eager.all()["output[0]"]
    assert float((pinned["output[0]"] / out.abs().clamp_min(1e-3)).max()) < 1e-4  # rounding only
    assert float(free["output[0]"].max()) > 0.1  # unpinned: a flipped tie moves a row by O(1)
    assert pinned.pinned == 3 * 2 and "pinned" in pinned.notes[0]


class Buckets(torch.nn.Module):
    """T5's relative-position buckets in miniature: an index made of floats truncated to integers
    (`(log(x) / log 2 * 4).to(torch.long)`), with x = 2^(k/4) putting every value on a bucket boundary."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(64, 8, generator=torch.Generator().manual_seed(3)))

    def forward(self, x):
        idx = (torch.log(x) / math.log(2) * 4).to(torch.long).clamp(0, 63)
        return self.table[idx].sum(-1) + x


def test_casts_of_floats_to_indices_are_pinned_like_decisions():
    # unpinned, a perturbed run moves a value across a boundary and reads another row of the table: an O(1)
    # jump the band would take for rounding noise (on T5 it hid a planted sign flip); pinned, only rounding
    x = 2.0 ** (torch.arange(1, 250, dtype=torch.float64) / 4)
    case = Case(Buckets(), (x.float(),), "buckets")
    out = run_once(case.model, case).all()["output"]
    free = eager_spread(case.model, case, runs=4, seed=1, pin_decisions=False)
    pinned = eager_spread(case.model, case, runs=4, seed=1)
    assert float(free["output"].max()) > 0.1
    assert float((pinned["output"] / out.abs()).max()) < 1e-5 and pinned.pinned >= 4


# ---- real computations: quiet on correct code, failing on planted bugs ---------------------------------

def test_a_correct_reordering_of_an_attention_block_stays_quiet():
    """bf16 --train, 10 seeds: the alternative op order is a correct computation (RMSE ~1x eager's); no
    element-band failure on any result, qkv-bias and position-embedding gradients included, and every margin
    well below 1. (The per-octave rule passes these too; the contrast on a real compile where it does not is
    the slow ViT test below.)"""
    worst = 0.0
    for seed in range(10):
        e, c, g, spread = _three_runs(_attn_case(seed, torch.bfloat16), seed=seed, variant_attr="variant")
        assert spread.calibration("grad.qkv.bias") is not None
        for name in e:
            band = _judge(c[name], e, g, spread, name)
            assert band.passed, (seed, name, band.message)
            worst = max(worst, band.margin)
    assert worst < 0.5


def _wide_range_case(dtype, k, seed):
    """A per-channel scale of values ~1e3 with k of them ~0.02 (an outlier-channel layout): eager rounds the
    small ones correctly."""
    x = torch.randn(4096, generator=_gen(seed)) * 1000
    x[:k] = torch.rand(k, generator=_gen(100 + seed)) * 0.02 + 0.01

    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gamma = torch.nn.Parameter(1 + 0.1 * torch.randn(4096, generator=_gen(200 + seed)))

        def forward(self, x):
            return x * self.gamma
    return Case(Scale().to(dtype), (x.to(dtype),), "scale")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("k", [3, 8])
def test_a_sign_flip_on_the_smallest_values_fails(dtype, k):
    for seed in range(3):
        e, c, g, spread = _three_runs(_wide_range_case(dtype, k, seed), train=False, seed=seed)
        wrong = c["output"].clone()
        wrong[:k] = -wrong[:k]
        r = _judge(wrong, e, g, spread, "output")
        assert not r.passed, (seed, r.message)
        assert _judge(c["output"], e, g, spread, "output").passed


def _linear_case(dtype, seed, rows=64, d=64):
    torch.manual_seed(seed)
    return Case(torch.nn.Linear(d, d).to(dtype), (torch.randn(rows, d).to(dtype),), "linear")


@pytest.mark.parametrize("dtype,k,runs", [(torch.float32, 3, 4), (torch.float32, 8, 4),
                                          (torch.bfloat16, 3, 8), (torch.bfloat16, 8, 4)])
def test_a_few_median_elements_ten_percent_off_fail(dtype, k, runs):
    """Where eager is accurate (a Linear: one accumulation, one rounding; 4096 elements). In bf16 10% is only
    13-26 ulps, within reach of a 2x-noisier correct run whose 5 draws all came out small (p0 ~ 2e-5 at
    T = 16 with K = 4): 8 such elements fail at K = 4, 3 need K = 8 (p0 ~ 2e-7)."""
    e, c, g, spread = _three_runs(_linear_case(dtype, 0), train=False, runs=runs)
    out, gold = c["output"].clone(), g["output"]
    mid = gold.abs().flatten().argsort()[out.numel() // 2:][:k]
    out.view(-1)[mid] = (gold.view(-1)[mid] * 1.1).to(dtype)
    r = _judge(out, e, g, spread, "output")
    assert not r.passed, r.message


def test_one_fp32_element_ten_percent_off_where_eager_rounds_correctly_fails():
    e, c, g, spread = _three_runs(_linear_case(torch.float32, 1), train=False)
    out = c["output"].clone()
    out.view(-1)[777] *= 1.1
    r = _judge(out, e, g, spread, "output")
    assert not r.passed and r.stats["argmax"] == 777, r.message


class ThreeTimesTheNoise(RandomRounding):
    """A degraded computation: every inexact op adds a uniform error of +-`amp` ulp before rounding to
    nearest, on every element. bf16: amp 1.5, a rounding error of std sqrt(1/12 + 3/4) = 0.91 ulp instead of
    0.29; fp32, where eager's error is mostly the GEMMs' accumulation, amp 4. Both give ~3x eager's RMSE."""

    amp = 1.5

    def _perturb(self, t):
        f = t.double()
        ulp = torch.ldexp(torch.ones_like(f), torch.frexp(f)[1] - {torch.float32: 24, torch.bfloat16: 8}[t.dtype])
        r = torch.rand(t.shape, generator=self._gen(t.device), dtype=torch.float64)
        t.copy_(f + (2 * r - 1) * self.amp * ulp)


@pytest.mark.parametrize("dtype,amp", [(torch.float32, 4.0), (torch.bfloat16, 1.5)])
def test_a_systematic_three_times_the_noise_fails(dtype, amp):
    """On 3000-4000 elements (output, qkv weight gradient). On 512-1024 a 3x systematic error is at the edge
    of the band rule (margin 0.7-1.5): the RMSE check (ratio 2) is the one for systematic errors."""
    case = _attn_case(0, dtype, batch=8)
    e, c, g, spread = _three_runs(case, variant_attr="variant")
    mode = ThreeTimesTheNoise(7, reassociate=False, decompose=False)  # the plant degrades eager's own ops
    mode.amp = amp
    with mode:
        noisy = run_once(case.model, case, train=True, seed=0).all()
    for name in ("output", "grad.qkv.weight"):
        rmse = [float((x[name].double() - g[name]).pow(2).mean().sqrt()) for x in (noisy, e)]
        assert 2.2 < rmse[0] / rmse[1] < 4
        r = _judge(noisy[name], e, g, spread, name)
        assert not r.passed, (name, r.message)
        assert _judge(c[name], e, g, spread, name).passed


def test_the_band_can_stand_in_for_eager_in_the_per_octave_rule():
    """octave_reference: the existing per-octave MaxRel and small-value MaxAbs judged against the band's
    per-octave maxima instead of eager's one draw (the other checks keep eager's own error)."""
    e, c, g, spread = _three_runs(_wide_range_case(torch.bfloat16, 3, 0), train=False)
    e, c, g, s = e["output"], c["output"], g["output"], spread["output"]
    base = compare(e, e, g)
    ref = octave_reference(base.vs_golden, e, g, s, applied=base.applied)
    assert ref.rmse == base.vs_golden.rmse and ref.octaves().keys() == base.vs_golden.octaves().keys()
    assert all(ref.octaves()[i][1] >= n_err[1] for i, n_err in base.vs_golden.octaves().items())
    assert compare(c, e, g, reference_vs_golden=ref).passed
    wrong = c.clone()
    wrong[:3] = -wrong[:3]
    assert not compare(wrong, e, g, reference_vs_golden=ref).passed


def test_scaling_every_tensor_by_a_power_of_two_changes_no_verdict():
    e, c, g, spread = _three_runs(_attn_case(1, torch.bfloat16), variant_attr="variant")
    name = "grad.qkv.bias"
    wrong = c[name].clone()
    wrong[:4] = -wrong[:4]
    f, rest = spread.calibration(name)
    for comp in (c[name], wrong):
        a = judge_band(comp, e[name], g[name], spread[name], runs=4, calibration=(f, rest))
        b = judge_band(comp * 2 ** -20, e[name] * 2 ** -20, g[name] * 2 ** -20, spread[name] * 2 ** -20, runs=4,
                       calibration=(f * 2 ** -20, rest * 2 ** -20))
        assert a.passed == b.passed and a.stats["max_z"] == pytest.approx(b.stats["max_z"])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_stock_inductor_on_the_attention_block_stays_within_the_band(dtype):
    """The compiled side is torch.compile(backend="inductor") itself, --train, 5 seeds (one compile:
    parameters are graph inputs, so new weights do not recompile). On CPU, Inductor reproduces this block's
    bf16 eager to the bit (its bf16 rounding emulation); in fp32 it differs on most elements."""
    torch._dynamo.reset()
    differed = 0
    try:
        for seed in range(5):
            case = _attn_case(seed, dtype, batch=4)
            state = state_snapshot(case)
            eager = run_once(case.model, case, train=True, seed=seed, state=state)
            gcase = golden_case(case, torch.float64)
            g = run_once(gcase.model, gcase, train=True, cotangents=eager.cotangents).all()
            c = run_once(torch.compile(case.model, backend="inductor"), case, train=True,
                         cotangents=eager.cotangents, state=state).all()
            spread = eager_spread(case.model, case, runs=4, train=True, cotangents=eager.cotangents, state=state,
                                  seed=seed)
            e = eager.all()
            differed += sum(not torch.equal(c[k], e[k]) for k in e)
            for name in e:
                band = _judge(c[name], e, g, spread, name)
                assert band.passed, (seed, name, band.message)
    finally:
        torch._dynamo.reset()
    assert differed >= 5 or dtype is torch.bfloat16  # fp32: Inductor did compute differently


@pytest.mark.slow
def test_stock_inductor_vit_the_old_per_octave_rule_fails_and_the_band_passes():
    """Issue 27's flap on a real compile: a tiny ViT (1 layer, hidden 16, 1 head, 40x40 images, patch 8;
    models/families.py's draw "vit"/1), bf16 --train, stock Inductor on CPU. The per-octave MaxRel fails the
    position-embedding gradient (max_rel 0.346 vs eager 0.0291 on 125 elements of [2^-7, 2^-6)) with a
    compiled RMSE 0.55x eager's; no row leaves eager's noise band."""
    import zlib
    tf = pytest.importorskip("transformers")
    from fusecheck.runs.cast import prepare_case

    class Logits(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(pixel_values=x).logits

    cfg = tf.ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=1, intermediate_size=53,
                       hidden_act="gelu_new", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                       initializer_range=0.1, layer_norm_eps=1e-12, image_size=40, patch_size=8, num_channels=3,
                       qkv_bias=True, num_labels=2)
    torch.manual_seed(zlib.crc32(b"vit/1"))
    model = Logits(tf.ViTForImageClassification(cfg)).eval()
    case = prepare_case(Case(model, (torch.randn(2, 3, 40, 40),), "vit"), torch.bfloat16, "cpu")
    state = state_snapshot(case)
    torch._dynamo.reset()
    try:
        eager = run_once(case.model, case, train=True, seed=1, state=state)
        c = run_once(torch.compile(case.model, backend="inductor"), case, train=True, cotangents=eager.cotangents,
                     state=state).all()
    finally:
        torch._dynamo.reset()
    gcase = golden_case(case, torch.float64)
    g = run_once(gcase.model, gcase, train=True, cotangents=eager.cotangents).all()
    spread = eager_spread(case.model, case, runs=4, train=True, cotangents=eager.cotangents, state=state, seed=1)
    e = eager.all()
    old_fails = [n for n in e if not compare(c[n], e[n], g[n]).passed]
    for name in e:
        band = _judge(c[name], e, g, spread, name)
        assert band.passed, (name, band.message)
    if torch.__version__.startswith("2.13"):  # measured with this Inductor; another may round elsewhere
        assert old_fails == ["grad.model.vit.embeddings.position_embeddings"]
