"""The one-pass core (issue 12) against the per-pair core it replaced (tests/compare_reference.py), on
random tensors: every metric of every pair equal (counts and maxima exactly, sums to fp64 rounding), the
same scale, the same verdict. Plus the compiled path's padding and its self-check, with the kernel stubbed
so that no compile runs on CPU (FUSECHECK_TEST_COMPILED=1 compiles for real, ~1 min on 2 cores)."""
import math
import os
import warnings

import pytest
import torch

from fusecheck.compare import compare
from fusecheck.compare.cores import c_core, inductor_core, triton_core
from fusecheck.compare.metrics import multi_pair_metrics
from fusecheck.compare.scale import finite_abs_max
from fusecheck.compare.verdict import judge
from fusecheck.policy import Policy
from tests import compare_reference as old

FP8 = [d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) if d is not None]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.complex64, *FP8]
SIZES = [0, 1, 2, 7, 301]


def _values(n: int, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """golden (fp64, or complex128), eager and compiled in `dtype`, with wide magnitudes, exact zeros,
    values below the small-value threshold, subnormals and NaN/Inf planted at random positions."""
    shape = (n, 2) if dtype.is_complex else (n,)
    g = torch.randn(shape, dtype=torch.float64, generator=gen)
    g = g * torch.exp2(torch.randint(-40, 12, shape, generator=gen).double())
    if n:
        for value, share in ((0.0, 0.05), (1e-30, 0.02), (5e-324, 0.01), (math.nan, 0.01), (math.inf, 0.01),
                             (-math.inf, 0.01)):
            g[torch.rand(shape, generator=gen) < share] = value
    noise = 1 + 1e-2 * torch.randn(shape, dtype=torch.float64, generator=gen)
    r = g * noise
    if n:
        r[torch.rand(shape, generator=gen) < 0.02] = math.nan  # compiled-only NaN
        r[torch.rand(shape, generator=gen) < 0.01] = math.inf  # compiled-only Inf
        flip = torch.isinf(r) & (torch.rand(shape, generator=gen) < 0.3)
        r[flip] = -r[flip]  # +Inf where eager has -Inf and back
    if dtype.is_complex:
        g, r = torch.view_as_complex(g.contiguous()), torch.view_as_complex(r.contiguous())
    return g, g.to(dtype), r.to(dtype)


# Sums are added in another order: a metric differs by fp64 rounding (1e-11 relative), except the standard
# error of mean_rel, sqrt(sum(RE^2)/n - mean^2), whose cancellation amplifies that rounding.
REL = {"mean_rel_se": 1e-6}


# metrics added after the reference was frozen, derived from accumulators it has (dot, b_sq, sq_err): checked
# against direct formulas in tests/compare/test_scale_error.py and test_offset_error.py
SINCE_REFERENCE = {"scale_error", "scale_error_unit_se", "offset_error", "offset_error_se"}


def _same(a: dict, b: dict, where: str) -> None:
    assert set(a) == set(b) - SINCE_REFERENCE, where
    for k, v in a.items():
        w = b[k]
        if math.isnan(v) or math.isnan(w):
            assert math.isnan(v) and math.isnan(w), (where, k, v, w)
        else:
            assert w == pytest.approx(v, rel=REL.get(k, 1e-11), abs=0.0), (where, k, v, w)


def _judged(result, reference, golden):
    """What compare() hands the metric core: fp8 on exact fp32 copies, complex as (real, imag) pairs."""
    if result.dtype in FP8:
        result, reference = result.float(), reference.float()
    if result.is_complex():
        result, reference = torch.view_as_real(result), torch.view_as_real(reference)
        golden = torch.view_as_real(golden.to(torch.complex128))
    return result, reference, golden


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_metric_matches_the_per_pair_core(dtype):
    gen = torch.Generator().manual_seed(12)
    judged_dtype = torch.float32 if dtype.is_complex else dtype
    for n in SIZES:
        for chunk in (7, None):
            g, ref, res = _values(n, dtype, gen)
            res, ref, g = _judged(res, ref, g)
            for thr, atol in ((2.0 ** -20, 1e-5), (0.0, 0.0)):
                kw = dict(ulp_dtype=judged_dtype, rtol=1.6e-2, atol=atol, small_threshold=thr,
                          chunk_elems=chunk or old.DEFAULT_CHUNK_ELEMS)
                pairs = {"vs_reference": (res, ref), "vs_golden": (res, g), "reference_vs_golden": (ref, g)}
                want = old.multi_pair_metrics(pairs, **kw)
                got = multi_pair_metrics(pairs, **{**kw, "chunk_elems": chunk})
                for key in pairs:
                    _same(want[key].values, got[key].values, f"{dtype} n={n} chunk={chunk} thr={thr} {key}")
            if n:
                assert finite_abs_max([ref, g], chunk) == max(old.finite_abs_max(t) for t in (ref, g))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_verdicts_match_the_per_pair_core(dtype):
    gen = torch.Generator().manual_seed(7)
    policy = Policy()
    for trial in range(6):
        g = torch.randn(3001, dtype=torch.float64, generator=gen) * (10.0 ** (trial - 3))
        ref = g.to(dtype)
        res = (g * (1 + [1e-3, 1e-2, 0.3][trial % 3] * torch.randn(3001, dtype=torch.float64, generator=gen)))
        res = res.to(dtype)
        if trial == 4:
            res[17] = math.nan
        got = compare(res, ref, g, policy=policy, chunk_elems=1000)
        abs_max = max(old.finite_abs_max(t) for t in (ref, g))
        assert got.applied.abs_max == abs_max
        thr, tol = got.applied.small_threshold, got.applied.tolerance
        kw = dict(ulp_dtype=dtype, rtol=tol.rtol, atol=tol.atol, small_threshold=thr, chunk_elems=1000)
        pairs = {"r": (res, ref), "g": (res, g), "rg": (ref, g)}
        m = old.multi_pair_metrics(pairs, **kw)
        for key, new in multi_pair_metrics(pairs, **kw).items():  # what the reference cannot derive, from the new core
            m[key].values.update({k: new.values[k] for k in SINCE_REFERENCE})
        want = judge(vs_reference=m["r"], vs_golden=m["g"], reference_vs_golden=m["rg"], tolerance=tol,
                     policy=policy, exact=False, exact_reason="", dtype=dtype, small_threshold=thr)
        assert (got.verdict.status, got.verdict.code) == (want.status, want.code), trial


@pytest.fixture
def stub_compiled(monkeypatch):
    """The compiled path with a tiny chunk and the eager function standing in for the Inductor kernel
    (optionally corrupted): exercises padding, its correction and the self-check without a compile."""
    monkeypatch.setenv(inductor_core.ENV, "1")
    monkeypatch.setenv(c_core.ENV, "0")  # the C core would answer first on CPU
    monkeypatch.setitem(inductor_core.CHUNK_ELEMS, "cpu", 64)
    monkeypatch.setattr(inductor_core, "_kernels", {})

    def install(corrupt=None):
        def fake_compile(fn, raws, consts, params):
            def kernel(chunk, ps):
                out = fn(chunk, *consts, *ps)
                return out if corrupt is None else corrupt(out)
            return kernel
        monkeypatch.setattr(inductor_core, "_compile", fake_compile)
    return install


def _pairs(n=1000, seed=3):
    gen = torch.Generator().manual_seed(seed)
    g, ref, res = _values(n, torch.bfloat16, gen)
    return {"vs_reference": (res, ref), "vs_golden": (res, g), "reference_vs_golden": (ref, g)}


KW = dict(ulp_dtype=torch.bfloat16, rtol=1.6e-2, atol=1e-5, small_threshold=2.0 ** -20)


@pytest.mark.parametrize("n", [64, 65, 1000, 127])
def test_padded_tail_chunks_are_corrected_exactly(stub_compiled, n):
    stub_compiled()
    pairs = _pairs(n)
    want = old.multi_pair_metrics(pairs, **KW)
    got = multi_pair_metrics(pairs, **KW)
    assert any(k is not None for k in inductor_core._kernels.values())  # the compiled path did run
    for key in pairs:
        _same(want[key].values, got[key].values, f"n={n} {key}")
    assert finite_abs_max([pairs["reference_vs_golden"][0], pairs["vs_golden"][1]]) == max(
        old.finite_abs_max(t) for t in pairs["reference_vs_golden"])


def test_a_miscompiled_kernel_is_caught_and_the_eager_core_answers(stub_compiled):
    # planted bug: the "compiled" reduction undercounts mismatches by one per chunk
    stub_compiled(corrupt=lambda out: out - 1.0)
    pairs = _pairs()
    want = old.multi_pair_metrics(pairs, **KW)
    with pytest.warns(UserWarning, match="disagreed"):
        got = multi_pair_metrics(pairs, **KW)
    for key in pairs:
        _same(want[key].values, got[key].values, key)
    assert all(k is None for k in inductor_core._kernels.values())


def test_a_failing_compile_falls_back_to_eager(stub_compiled, monkeypatch):
    def broken(*a):
        raise RuntimeError("no C++ compiler")
    monkeypatch.setattr(inductor_core, "_compile", broken)
    pairs = _pairs()
    with pytest.warns(UserWarning, match="unavailable"):
        got = multi_pair_metrics(pairs, **KW)
    want = old.multi_pair_metrics(pairs, **KW)
    _same(want["vs_golden"].values, got["vs_golden"].values, "vs_golden")


@pytest.mark.skipif(os.environ.get("FUSECHECK_TEST_COMPILED") != "1" and not torch.cuda.is_available(),
                    reason="compiles with Inductor (~1 min on 2 CPU cores): FUSECHECK_TEST_COMPILED=1, or CUDA")
@pytest.mark.parametrize("device", ["cuda" if torch.cuda.is_available() else "cpu"])
def test_the_real_compiled_kernel_matches_the_per_pair_core(device, monkeypatch):
    monkeypatch.setenv(inductor_core.ENV, "1")
    monkeypatch.setenv(triton_core.ENV, "0")  # on CUDA the Triton core would answer first
    monkeypatch.setenv(c_core.ENV, "0")
    n = inductor_core.chunk_elems(torch.device(device)) + 4097  # one full chunk and a padded tail
    gen = torch.Generator().manual_seed(5)
    g, ref, res = _values(n, torch.bfloat16, gen)
    pairs = {k: (a.to(device), b.to(device)) for k, (a, b) in
             {"vs_reference": (res, ref), "vs_golden": (res, g), "reference_vs_golden": (ref, g)}.items()}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = multi_pair_metrics(pairs, **KW)
        torch._dynamo.reset()  # run_check does this between phases: the kernel must survive it
        again = multi_pair_metrics(pairs, **KW)
    assert not [w for w in seen if "fusecheck:" in str(w.message)]  # no fallback to eager
    assert any(k is not None for k in inductor_core._kernels.values())
    want = old.multi_pair_metrics(pairs, **KW)
    for key in pairs:
        _same(want[key].values, got[key].values, key)
        _same(want[key].values, again[key].values, key)
