"""The C comparison core (fusecheck/compare/cores/c_core.*) against the torch core (torch_core.chunk_partials): every
accumulator of every pair, counts and maxima bit-identical, sums to fp64 rounding, on NaN/Inf, +-0,
subnormals, threshold ties, octave edges, overflow, mixed dtypes, block and thread tails, non-contiguous
tensors. Plus the guards: a miscompiled core is caught by the first-call self-check (a mutant built from
the source with one comparison changed), no compiler falls back with one warning, the cache is reused."""
import math
import warnings

import pytest
import torch

from fusecheck.compare import compare
from fusecheck.compare.accumulators import COLUMNS, SIGNED_SUMS
from fusecheck.compare.cores import c_core, torch_core
from fusecheck.compare.metrics import ACCUMULATORS, octave_base, ulp_format
from fusecheck.compare.scale import finite_abs_max

CPU = torch.device("cpu")
# accumulators that are real-valued sums (summation order differs); every other entry must be identical
ROUNDED = {"sq_err", "sum_rel", "sq_rel", "dot", "a_sq", "b_sq", "ulp_sum", "sum_err"}


def _params(ulp_dtype=torch.bfloat16, rtol=1.6e-2, atol=1e-5, small_threshold=2.0 ** -20):
    mant, min_eb = ulp_format(ulp_dtype)
    return torch_core.params(torch.float64, mant=mant, min_eb=min_eb, rtol=rtol, atol=atol,
                        small_threshold=small_threshold, small_atol=atol, octave_base=octave_base(small_threshold))


def _torch_core(tensors, pairs, params):
    out = torch_core.walk(tensors, pairs, CPU, torch.float64, *params, chunk_elems=torch_core.CPU_CHUNK_ELEMS)
    bits = list(ACCUMULATORS).index("bits_equal")
    out[:, bits] = torch.where(out[:, bits] < 0, -1.0, out[:, bits])  # -1 per chunk: the dtypes differ
    return out


def _assert_same(fast, want, where=""):
    assert fast is not None, where
    assert fast.shape == want.shape, where
    for p in range(want.shape[0]):
        for j, name in enumerate(COLUMNS):
            f, w = float(fast[p, j]), float(want[p, j])
            if name in SIGNED_SUMS and math.isfinite(w):  # cancels: rounding bounded by its sums of squares
                x, y = (float(want[p, COLUMNS.index(k)]) for k in SIGNED_SUMS[name])
                assert abs(f - w) <= 1e-10 * math.sqrt(x * y) + 1e-300, (where, p, name, f, w)
            elif name in ROUNDED and math.isfinite(w):
                assert f == pytest.approx(w, rel=1e-10, abs=1e-300), (where, p, name, f, w)
            else:
                assert f == w or (math.isnan(f) and math.isnan(w)), (where, p, name, f, w)


def _wide(n, gen, dtype):
    """fp64 golden with wide magnitudes, planted specials; eager and result in `dtype` with noise."""
    scale = torch.exp2(torch.randint(-30, 12, (n,), generator=gen).double())
    g = torch.randn(n, dtype=torch.float64, generator=gen) * scale
    specials = (0.0, -0.0, 1e-30, 5e-324, 2.0 ** -1030, math.nan, math.inf, -math.inf, 2.0 ** -20, 2.0 ** -19, 1.0,
                0.5)
    for value in specials:
        g[torch.rand(n, generator=gen) < 0.01] = value
    r = g * (1 + 1e-2 * torch.randn(n, dtype=torch.float64, generator=gen))
    r[torch.rand(n, generator=gen) < 0.02] = math.nan
    r[torch.rand(n, generator=gen) < 0.01] = math.inf
    r[torch.rand(n, generator=gen) < 0.01] = -math.inf
    same = torch.rand(n, generator=gen) < 0.05
    r[same] = g[same]  # result equal to the golden (and to eager): zero differences, equal bits
    ref = g.to(dtype)
    ref[torch.rand(n, generator=gen) < 0.01] = -0.0
    return g, ref, r.to(dtype)


PAIRS = ((2, 1), (2, 0), (1, 0))  # compare()'s: result-eager, result-golden, eager-golden
FLOATS = [torch.bfloat16, torch.float16, torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("n", [1, 2, 1023, 1025, 9001])
def test_every_accumulator_matches_the_torch_core(dtype, n, monkeypatch):
    monkeypatch.setattr(c_core, "PARALLEL_MIN", 512)  # several threads and pieces on small tensors, with tails
    gen = torch.Generator().manual_seed(n)
    g, ref, res = _wide(n, gen, dtype)
    tensors = [g, ref, res]
    if n > 2:  # the first half without NaN/Inf: blocks that take the all-finite loop, then the others
        for t in tensors:
            t[:n // 2] = torch.nan_to_num(t[:n // 2], nan=0.5, posinf=2.0, neginf=-3.0)
    for params in (_params(dtype), _params(torch.float64, small_threshold=0.0, atol=0.0),
                   _params(torch.float16, rtol=2.0 ** -7, atol=2.0 ** -7, small_threshold=1.0)):
        _assert_same(c_core.walk(tensors, PAIRS, CPU, torch.float64, *params),
                     _torch_core(tensors, PAIRS, params), f"{dtype} n={n}")
    assert c_core.finite_abs_max(tensors) == finite_abs_max(tensors, chunk_elems=torch_core.CPU_CHUNK_ELEMS)
    assert c_core.finite_abs_max([torch.full((n,), math.nan, dtype=dtype)]) == 0.0


def test_ties_octave_edges_and_overflow_match():
    """Elements exactly on each threshold (mismatch bound, small-value threshold, RE 1e-3, octave edges,
    ULP > 1) and differences that overflow to Inf."""
    b = torch.tensor([1.0, 1.0, 2.0 ** -20, 2.0 ** -20, 4.0, 0.5, 1.0, 1e308, 2.0 ** -7, 1.0], dtype=torch.float64)
    a = torch.tensor([1 + 2.0 ** -6, 1 + 2.0 ** -5, 2.0 ** -19, 0.0, 4.0 * (1 + 2.0 ** -7), 0.5 + 2.0 ** -9,
                      1 + 1e-3, -1e308, 0.0, 1 + 2.0 ** -7], dtype=torch.float64)
    params = _params(torch.bfloat16, rtol=2.0 ** -7, atol=2.0 ** -7, small_threshold=2.0 ** -20)
    tensors = [b, a, a.clone()]
    _assert_same(c_core.walk(tensors, PAIRS, CPU, torch.float64, *params), _torch_core(tensors, PAIRS, params))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_every_bit_pattern_of_a_16_bit_float_converts_exactly(dtype):
    x = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).view(dtype)
    tensors = [x.double(), x, x.flip(0)]
    params = _params(dtype)
    fast = c_core.walk(tensors, PAIRS, CPU, torch.float64, *params)
    _assert_same(fast, _torch_core(tensors, PAIRS, params))
    assert float(fast[2, list(ACCUMULATORS).index("max_abs")]) == 0.0  # x against x.double(): no difference
    assert c_core.finite_abs_max([x]) == float(x[torch.isfinite(x)].abs().max())


def test_mixed_dtypes_and_non_contiguous_tensors(monkeypatch):
    monkeypatch.setattr(c_core, "NONCONTIGUOUS_CHUNK", 1000)  # several chunks, a short last one
    gen = torch.Generator().manual_seed(4)
    g, ref, res = _wide(61 * 97, gen, torch.float16)
    tensors = [g.float().view(61, 97).t(), ref.view(61, 97).t(), res.bfloat16().view(61, 97).t()]
    params = _params(torch.float16)
    _assert_same(c_core.walk(tensors, PAIRS, CPU, torch.float64, *params), _torch_core(tensors, PAIRS, params))
    want = torch_core.walk(tensors, PAIRS, CPU, torch.float64, *params, chunk_elems=64)  # bits_equal: -1 per chunk
    assert (want[:, list(ACCUMULATORS).index("bits_equal")] < 0).all()
    assert finite_abs_max(tensors) == finite_abs_max(tensors, chunk_elems=1000)


def test_compare_gives_the_same_metrics_and_verdict_with_either_core(monkeypatch):
    gen = torch.Generator().manual_seed(9)
    g, ref, res = _wide(200_000, gen, torch.bfloat16)
    fast = compare(res, ref, g)
    monkeypatch.setenv(c_core.ENV, "0")
    slow = compare(res, ref, g)
    assert (fast.verdict.status, fast.verdict.code) == (slow.verdict.status, slow.verdict.code)
    assert fast.applied == slow.applied
    for name in ("vs_reference", "vs_golden", "reference_vs_golden"):
        f, s = getattr(fast, name).values, getattr(slow, name).values
        for k in s:
            assert f[k] == pytest.approx(s[k], rel=1e-6 if k == "mean_rel_se" else 1e-10, nan_ok=True), (name, k)


def test_what_the_c_core_does_not_take_goes_to_the_torch_core(monkeypatch):
    params = _params()
    x = torch.ones(10)
    assert c_core.walk([x.int(), x.int()], ((0, 1),), CPU, torch.float64, *params) is None  # integers
    assert c_core.walk([x, x, x, x], ((0, 1), (2, 3)), CPU, torch.float64, *params) is None  # four tensors
    assert c_core.walk([x[:0], x[:0]], ((0, 1),), CPU, torch.float64, *params) is None  # empty: nothing to reduce
    monkeypatch.setenv(c_core.ENV, "0")
    assert c_core.walk([x, x], ((0, 1),), CPU, torch.float64, *params) is None
    assert c_core.finite_abs_max([x]) is None


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """c_core with nothing loaded or checked yet, building into an empty cache."""
    monkeypatch.setenv(c_core.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(c_core, "_lib", None)
    monkeypatch.setattr(c_core, "_lib_error", None)
    monkeypatch.setattr(c_core, "_checked", {})
    return tmp_path


def _mutant(fresh, monkeypatch, old, new):
    source = c_core.SOURCE.read_text()
    assert old in source
    mutant = fresh / "mutant.c"
    mutant.write_text(source.replace(old, new))
    monkeypatch.setattr(c_core, "SOURCE", mutant)


def test_a_miscompiled_core_is_caught_by_the_self_check(fresh, monkeypatch):
    # planted bug: a tie on the mismatch bound counted as a mismatch (>= for >)
    _mutant(fresh, monkeypatch, "d > atol + rtol * babs", "d >= atol + rtol * babs")
    monkeypatch.setattr(c_core, "_self_test", lambda lib: None)  # as if the load-time self-test missed it
    b = torch.ones(5000, dtype=torch.float64)
    a = (b * (1 + 2.0 ** -6)).bfloat16()  # |a - b| = atol + rtol * |b| exactly
    params = _params(torch.bfloat16, rtol=2.0 ** -7, atol=2.0 ** -7)
    with pytest.warns(UserWarning, match="the C comparison core disagreed"):  # the per-dtype first-chunk check
        assert c_core.walk([b, a], ((1, 0),), CPU, torch.float64, *params) is None
    assert c_core.walk([b, a], ((1, 0),), CPU, torch.float64, *params) is None  # the torch core, from now on
    want = _torch_core([b, a], ((1, 0),), params)
    assert float(want[0, list(ACCUMULATORS).index("mismatches")]) == 0.0


def test_the_equivalence_check_would_see_a_wrong_octave(fresh, monkeypatch):
    # planted bug: octaves counted from one below the threshold's exponent; the test helper must see it
    _mutant(fresh, monkeypatch, "int64_t o = log2b - obase;", "int64_t o = log2b - obase + 1;")
    monkeypatch.setattr(c_core, "_agree", lambda fast, reference: True)  # as if the first chunk agreed
    gen = torch.Generator().manual_seed(2)
    g, ref, res = _wide(3000, gen, torch.bfloat16)
    params = _params()
    with pytest.raises(AssertionError, match="octave_n"):
        _assert_same(c_core.walk([g, ref, res], PAIRS, CPU, torch.float64, *params),
                     _torch_core([g, ref, res], PAIRS, params))


def test_no_compiler_falls_back_with_one_warning(fresh, monkeypatch):
    monkeypatch.setenv("CC", str(fresh / "no-such-cc"))
    x = torch.randn(100)
    with pytest.warns(UserWarning, match="C comparison core is unavailable"):
        got = compare(x, x * 1.001, x.double())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        again = compare(x, x * 1.001, x.double())
    assert got.passed == again.passed and got.vs_golden.values == again.vs_golden.values


def test_the_build_is_cached_on_disk(fresh, monkeypatch):
    first = c_core._build(c_core._compiler())
    assert first.parent == fresh and first.exists()
    stamp = first.stat().st_mtime_ns
    calls = []
    real_run = c_core.subprocess.run
    monkeypatch.setattr(c_core.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or real_run(cmd, **kw))
    assert c_core._build(c_core._compiler()) == first
    assert first.stat().st_mtime_ns == stamp and all("--version" in c for c in calls)  # no second compile


def test_pieces_cover_the_range_once_and_a_failure_reaches_the_caller(monkeypatch):
    for n in (1, 1023, 1 << 16, (1 << 17) + 1, 10 ** 7 + 3):
        threads, pieces = c_core._pieces(n)
        assert pieces[0][0] == 0 and pieces[-1][1] == n and all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
        assert all(hi - lo <= c_core.CALL_ELEMS for lo, hi in pieces) and 1 <= threads <= torch.get_num_threads()
    monkeypatch.setattr(c_core, "PARALLEL_MIN", 1024)

    def boom(lo, hi):
        if lo > 0:
            raise RuntimeError("planted")
        return hi - lo
    with pytest.raises(RuntimeError, match="planted"):
        c_core._parallel(boom, 100_000)
    assert sum(c_core._parallel(lambda lo, hi: hi - lo, 100_000)) == 100_000


def test_the_load_time_self_test_catches_the_tie_bug_too(fresh, monkeypatch):
    _mutant(fresh, monkeypatch, "d > atol + rtol * babs", "d >= atol + rtol * babs")
    with pytest.warns(UserWarning, match="self-test disagreed"):
        assert c_core.library() is None


def test_a_broken_nan_path_is_caught_before_any_nan_arrives(fresh, monkeypatch):
    # planted bug: NaN in the expected tensor counted from the actual one; the user's data is all finite,
    # so only the library's own self-test at load can see it
    _mutant(fresh, monkeypatch, "b_nan += nb;", "b_nan += na;")
    x = torch.randn(5000)
    with pytest.warns(UserWarning, match="self-test disagreed"):
        got = compare(x * 1.001, x, x.double())
    monkeypatch.setenv(c_core.ENV, "0")
    want = compare(x * 1.001, x, x.double())
    assert got.vs_golden.values == want.vs_golden.values and c_core.library() is None
