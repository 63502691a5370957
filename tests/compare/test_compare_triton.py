"""The Triton comparison core (fusecheck/compare/triton_core.py) against the eager core it replaces on CUDA:
every accumulator of every pair (counts and maxima bit-identical, sums to fp64 rounding) on random tensors
with NaN/Inf/±0/subnormals/ties, mixed dtypes and tails; its dispatch from cores.walk and scale, and its
fallbacks. On a CUDA machine the real kernel runs; elsewhere Triton's interpreter runs it on CPU tensors
(slow per tile: tiles are small here). Skipped without Triton (CI)."""
import math
import os
import sys
import warnings
from fractions import Fraction

import pytest
import torch

CUDA = torch.cuda.is_available()
# The interpreter is chosen when jit functions are decorated, Triton's own (tl.zeros) included: without CUDA
# it is selected before triton is first imported in this process, while this module's kernels are decorated
# and while each test runs (the environment is restored after: other tests never see it).
TRITON_WAS_IMPORTED = "triton" in sys.modules
_env = os.environ.get("TRITON_INTERPRET")
if not CUDA:
    os.environ["TRITON_INTERPRET"] = "1"
try:
    triton = pytest.importorskip("triton")
    INTERPRETER_OK = bool(triton.knobs.runtime.interpret) and not TRITON_WAS_IMPORTED
    if INTERPRETER_OK or CUDA:
        from fusecheck.compare.cores import triton_kernels  # noqa: E402  (decorated now, for the interpreter on CPU)

        @triton.jit
        def _packed_counts_probe(out, high: triton.language.constexpr):
            lanes = triton.language.arange(0, 32)
            triton_kernels._store_two(out, (lanes * 0 + high) << 16 | 3)
finally:
    if _env is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = _env

from fusecheck.compare import cores, host, scale  # noqa: E402
from fusecheck.compare.accumulators import COLUMNS  # noqa: E402
from fusecheck.compare.cores import torch_core, triton_core  # noqa: E402
from fusecheck.compare.metrics import ACCUMULATORS, multi_pair_metrics, octave_base, ulp_format  # noqa: E402
from tests import compare_reference as old  # noqa: E402
from tests.compare.test_compare_equivalence import _same, _values  # noqa: E402

DEVICE = torch.device("cuda" if CUDA else "cpu")
NUMPY_OK = tuple(int(v) for v in __import__("numpy").__version__.split(".")[:2]) < (2, 4)
pytestmark = [
    pytest.mark.skipif(not CUDA and not NUMPY_OK, reason="Triton 3.6's interpreter needs numpy < 2.4 (int() of a "
                       "1-element array in its range())"),
    pytest.mark.skipif(not CUDA and not INTERPRETER_OK, reason="no CUDA, and triton was imported before this file "
                       "could select its interpreter: run this file alone"),
]
PAIRS = ((0, 1), (0, 2), (1, 2))  # (result, eager), (result, golden), (eager, golden)


@pytest.fixture(autouse=True)
def kernel(monkeypatch):
    """Small tiles and prefixes (the interpreter pays per tile), fresh fallback state, the interpreter on CPU."""
    monkeypatch.setattr(triton_core, "_failed", set())
    monkeypatch.setattr(triton_core, "_checked", set())
    monkeypatch.setattr(triton_core, "MIN_ELEMS", 0)  # small tensors here go through the kernel too
    monkeypatch.setenv(host.ENV, "0")  # ... and stay on their GPU (no host copy)
    if not CUDA:
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter reads it at run time too
        monkeypatch.setattr(triton_core, "BLOCK", 32)
        monkeypatch.setattr(triton_core, "CHECK_ELEMS", 37)
        # the Triton core answers for CPU tensors too (under the interpreter), before the C core
        triton = cores.Core("Triton", triton_core.__name__, frozenset({"cpu", "cuda"}))
        monkeypatch.setattr(cores, "CORES", (triton, cores.TORCH))


def _params(ulp_dtype, thr, atol):
    mant, min_eb = ulp_format(ulp_dtype)
    return torch_core.params(torch.float64, mant=mant, min_eb=min_eb, rtol=1.6e-2, atol=atol, small_threshold=thr,
                        small_atol=atol, octave_base=octave_base(thr))


def _check_partials(tensors, pairs, ulp_dtype, thr=2.0 ** -20, atol=1e-5, where=""):
    tensors = [t.to(DEVICE) for t in tensors]
    fp, ip = _params(ulp_dtype, thr, atol)
    got = triton_core._raw_partials(tensors, pairs, triton_core._fconsts(fp, DEVICE), tuple(ip.tolist()))
    want = torch_core.chunk_partials(tensors, pairs, torch.float64, fp.to(DEVICE), ip.to(DEVICE)).cpu()
    names = [f"{k}.{i}" if a.size > 1 else k for k, a in ACCUMULATORS.items() for i in range(a.size)]
    sums = triton_core.FLOAT_SUM_COLUMNS
    for p in range(len(pairs)):
        for j, name in enumerate(names):
            g, w = got[p, j].item(), want[p, j].item()
            if sums[j] and not (math.isnan(g) or math.isinf(g)):
                assert g == pytest.approx(w, rel=1e-11, abs=0.0), (where, pairs[p], name, g, w)
            else:
                assert g == w or (math.isnan(g) and math.isnan(w)), (where, pairs[p], name, g, w)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64], ids=str)
def test_every_accumulator_matches_the_eager_core(dtype):
    gen = torch.Generator().manual_seed(12)
    block = triton_core.BLOCK
    for n in (1, block - 1, 3 * block + 5):  # one element, a partial tile, several programs and a tail
        g, ref, res = _values(n, dtype, gen)
        for thr, atol in ((2.0 ** -20, 1e-5), (0.0, 0.0)):
            _check_partials([res, ref, g], PAIRS, dtype, thr, atol, f"{dtype} n={n} thr={thr}")


def test_mixed_dtypes_two_tensors_and_one_pair():
    gen = torch.Generator().manual_seed(4)
    g, ref, res = _values(70, torch.float32, gen)
    _check_partials([res, ref.half(), g], PAIRS, torch.float32, where="fp32 vs fp16 vs fp64")
    _check_partials([res.bfloat16(), ref], ((0, 1),), torch.bfloat16, where="bf16 vs fp32, one pair")
    _check_partials([res, ref], ((0, 1), (1, 0)), torch.float32, where="two tensors, both orders")


def test_ties_signed_zeros_subnormals_and_overflowing_differences():
    g = torch.tensor([0.0, -0.0, 5e-324, -5e-324, 2.0 ** -1022, 1e-300, 1.0, -1.0, 3.0, 3.0, 1e308, -1e308,
                      2.0 ** -20, 2.0 ** -21, math.nan, math.inf, -math.inf, 7.0], dtype=torch.float64)
    ref = g.clone()
    ref[[0, 2, 6, 8, 10]] = torch.tensor([-0.0, 0.0, 1.0 + 2 ** -52, 3.5, -1e308], dtype=torch.float64)
    res = ref.clone()
    res[[1, 7, 9, 14]] = torch.tensor([5e-324, -1.5, 3.5, 1.0], dtype=torch.float64)  # 3.0 -> 3.5 twice: a tie
    for thr, atol in ((2.0 ** -20, 1e-5), (0.0, 0.0)):
        _check_partials([res, ref, g], PAIRS, torch.float64, thr, atol, f"edges thr={thr}")
    _check_partials([res.float(), ref.float(), g], PAIRS, torch.float32, where="fp32 edges (subnormals, overflow)")


def _on_the_boundaries(rtol=1.6e-2, atol=1e-5) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(a, b) in fp64 whose difference lies exactly on a decision boundary of the eager core, per boundary:
    |a-b| equal to atol + rtol*|b| where an FMA would round that threshold otherwise, relative errors of
    exactly 1e-3 and 5e-3, exactly 1 bf16 ULP. Found by search (deterministic)."""
    gen = torch.Generator().manual_seed(6)
    found = {}
    b = torch.rand(40000, dtype=torch.float64, generator=gen) * 2e-6  # |b| << atol: |a| ~ the threshold itself
    tol = atol + rtol * b
    fused_tol = torch.tensor([float(Fraction(atol) + Fraction(rtol) * Fraction(x)) for x in b.tolist()],
                             dtype=torch.float64)  # one rounding, as an FMA would
    hi = torch.maximum(tol, fused_tol)
    hit = (tol != fused_tol) & ((b + hi) - b == hi)
    found["atol + rtol*|b|"] = ((b + hi)[hit], b[hit])
    b = (torch.rand(40000, dtype=torch.float64, generator=gen) + 0.5) * torch.exp2(
        torch.randint(-8, 8, (40000,), generator=gen).double())
    eps = torch.finfo(torch.float64).eps
    for c in (1e-3, 5e-3):
        a = torch.stack([b * (1 + c) * (1 + j * eps) for j in range(-4, 5)])
        hit = (a - b).abs() / (b.abs() + eps) == c
        found[f"relative error {c}"] = (a[hit], b.expand_as(a)[hit])
    ulp = torch.exp2(torch.floor(torch.log2(b[:100])) - ulp_format(torch.bfloat16)[0])
    found["1 ULP"] = (b[:100] + ulp, b[:100])
    return found


def test_exact_ties_at_every_threshold():
    # each boundary with its fp64 neighbours: a threshold rounded another way (an FMA on the GPU, a constant
    # in fp32) flips counts on these
    found = _on_the_boundaries()
    assert all(len(b) >= 10 for _, b in found.values()), {k: len(b) for k, (_, b) in found.items()}
    a, b = (torch.cat(parts) for parts in zip(*found.values()))
    a = torch.cat([a, torch.nextafter(a, a + 1), torch.nextafter(a, a - 1)])
    _check_partials([a, torch.cat([b, b, b])], ((0, 1),), torch.bfloat16, where="ties")


def test_nan_and_inf_in_only_the_result_or_only_eager():
    # the two golden pairs share one octave histogram where both A sides are finite; where only one of them is
    # NaN/Inf (here: either side, in several tiles) each pair's counts are corrected apart
    n = 3 * triton_core.BLOCK + 7
    g = torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 4
    ref, res = g.float(), (g * 1.001).float()
    ref[5::17] = math.nan
    ref[9::23] = -math.inf
    res[3::19] = math.inf
    res[11::29] = math.nan
    _check_partials([res, ref, g], PAIRS, torch.float32, where="one-sided NaN/Inf")


@pytest.mark.parametrize("order", ["rising", "falling"])
def test_octave_records_rising_along_the_tensor_and_falling(order):
    # rising: every tile sets new per-octave records (the slow path every time); falling: only the first
    n = 4 * triton_core.BLOCK + 3
    g = torch.exp2(torch.arange(n, dtype=torch.float64) % 9 - 4)  # nine octaves, interleaved
    scale_ = torch.linspace(1e-6, 1e-2, n, dtype=torch.float64)
    err = scale_ if order == "rising" else scale_.flip(0)
    _check_partials([(g * (1 + err)).float(), g.float(), g], PAIRS, torch.float32, where=order)


def _listed(tensors, pairs=PAIRS, ulp_dtype=torch.bfloat16, thr=2.0 ** -20):
    """(tiles, tiles the fast pass left to the exact kernel) of one call, after checking its partials."""
    tensors = [t.to(DEVICE) for t in tensors]
    _check_partials(tensors, pairs, ulp_dtype, thr, where="fast pass")
    fp, ip = _params(ulp_dtype, thr, 1e-5)
    stats = {}
    triton_core._raw_partials(tensors, pairs, triton_core._fconsts(fp, DEVICE), tuple(ip.tolist()), stats=stats)
    return stats["tiles"], stats["listed"]


def test_ordinary_tiles_take_the_fast_pass_and_only_nan_inf_and_the_tail_are_listed():
    block = triton_core.BLOCK
    g, ref, res = _values(6 * block, torch.bfloat16, torch.Generator().manual_seed(4))
    finite = [torch.nan_to_num(t, nan=1.0, posinf=2.0, neginf=-2.0) for t in (res, ref, g)]
    assert _listed(finite) == (6, 0)  # every tile ordinary: the exact kernel takes none
    assert _listed([t[:-3] for t in finite]) == (6, 1)  # the partial tail tile
    one_nan = [t.clone() for t in finite]
    one_nan[0][2 * block + 5] = math.nan
    one_nan[2][4 * block] = math.inf  # another tile, in the golden
    assert _listed(one_nan) == (6, 2)


def test_the_exact_kernel_alone_gives_what_the_fast_pass_gives(monkeypatch):
    g, ref, res = _values(5 * triton_core.BLOCK + 3, torch.bfloat16, torch.Generator().manual_seed(6))
    fp, ip = _params(torch.bfloat16, 2.0 ** -20, 1e-5)
    args = ([t.to(DEVICE) for t in (res, ref, g)], PAIRS, triton_core._fconsts(fp, DEVICE), tuple(ip.tolist()))
    fast = triton_core._raw_partials(*args)
    monkeypatch.setenv(triton_core.FAST_ENV, "0")
    stats = {}
    exact = triton_core._raw_partials(*args, stats=stats)
    assert stats["listed"] is None  # no fast pass ran
    sums = triton_core.FLOAT_SUM_COLUMNS
    assert torch.equal(fast[:, ~sums], exact[:, ~sums])
    torch.testing.assert_close(fast[:, sums], exact[:, sums], rtol=1e-12, atol=0.0)


def test_fast_pass_on_identical_tensors_and_relative_errors_below_2_to_minus_900():
    # pair (result, eager) identical: every maximum stays 0, no record ever set; then fp64 differences of a
    # few subnormal units against an exact 0 with no small-value threshold (all judged relative): relative
    # errors ~1e-308, records below the bound's 2^-900 floor, and exact octaves below the normal range
    block = triton_core.BLOCK
    g = torch.randn(4 * block, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    assert _listed([g.float(), g.float(), g], ulp_dtype=torch.float32) == (4, 0)
    b = torch.zeros(4 * block, dtype=torch.float64)
    a = torch.arange(4 * block, dtype=torch.float64) % 5 * 5e-324
    assert _listed([a, b], pairs=((0, 1),), ulp_dtype=torch.float64, thr=0.0) == (4, 0)


def _three_pairs(n, dtype=torch.bfloat16, seed=3):
    g, ref, res = _values(n, dtype, torch.Generator().manual_seed(seed))
    g, ref, res = g.to(DEVICE), ref.to(DEVICE), res.to(DEVICE)
    return {"vs_reference": (res, ref), "vs_golden": (res, g), "reference_vs_golden": (ref, g)}


KW = dict(ulp_dtype=torch.bfloat16, rtol=1.6e-2, atol=1e-5, small_threshold=2.0 ** -20)


def test_walk_dispatches_to_the_kernel_and_matches_the_per_pair_core():
    pairs = _three_pairs(3 * triton_core.BLOCK + 1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = multi_pair_metrics(pairs, **KW)
        got_max = scale.finite_abs_max([pairs["reference_vs_golden"][0], pairs["vs_golden"][1]])
    assert not [w for w in seen if "fusecheck:" in str(w.message)]  # quiet on correct code: no fallback
    assert len(triton_core._checked) == 2  # the comparison kernel and the abs-max kernel both ran
    want = old.multi_pair_metrics(pairs, **KW)
    for key in pairs:
        _same(want[key].values, got[key].values, key)
    assert got_max == max(old.finite_abs_max(t) for t in pairs["reference_vs_golden"])


def test_non_contiguous_tensors_go_in_chunks(monkeypatch):
    monkeypatch.setattr(triton_core, "DEFAULT_CHUNK_ELEMS", 40)
    g = torch.randn(9, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(8)).to(DEVICE).t()
    pairs = {"vs_golden": ((g * 1.001).bfloat16(), g)}
    got = multi_pair_metrics(pairs, **KW)
    assert triton_core._checked
    _same(old.multi_pair_metrics(pairs, **KW)["vs_golden"].values, got["vs_golden"].values, "transposed")


def test_a_wrong_kernel_is_caught_and_the_eager_core_answers(monkeypatch):
    # planted bug: the kernel's partials undercount by one (a lost element)
    real = triton_core._raw_partials
    monkeypatch.setattr(triton_core, "_raw_partials", lambda *a: real(*a) - 1.0)
    pairs = _three_pairs(50)
    with pytest.warns(UserWarning, match="disagreed with the eager core"):
        got = multi_pair_metrics(pairs, **KW)
    assert triton_core._failed and not triton_core._checked
    want = old.multi_pair_metrics(pairs, **KW)
    for key in pairs:
        _same(want[key].values, got[key].values, key)


def test_the_self_check_tolerates_rounding_of_a_cancelling_dot_and_catches_a_real_error(monkeypatch):
    # sum(N*B) of terms of both signs cancels to ~0: a rounding-sized difference passes, a real one does not
    g = torch.tensor([1.0, -1.0, 1e-3, -1e-3] * 10, dtype=torch.float64, device=DEVICE)
    tensors, pairs = [g.abs(), g], ((0, 1),)  # products +1, -1, +1e-6, -1e-6: the dot is exactly 0
    fp, ip = _params(torch.float64, 2.0 ** -20, 1e-5)
    args = (tensors, pairs, triton_core._fconsts(fp, DEVICE), tuple(ip.tolist()), fp, ip)  # _agrees' arguments
    real = triton_core._raw_partials
    dot = COLUMNS.index("dot")

    def shifted(by):
        def partials(*a):
            out = real(*a)
            out[:, dot] += by
            return out
        return partials
    monkeypatch.setattr(triton_core, "_raw_partials", shifted(1e-14))  # rounding-sized next to |N||B| ~ 6
    assert triton_core._agrees(*args)
    monkeypatch.setattr(triton_core, "_raw_partials", shifted(1e-3))  # planted: a lost term
    assert not triton_core._agrees(*args)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64], ids=str)
def test_the_first_call_check_passes_a_correct_kernel(dtype):
    # quiet on correct code: the specimen (every special value) and a prefix agree, for both exponent paths
    g = torch.randn(40, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    raws = [(g * 1.01).to(dtype), g.to(dtype), g]
    for thr in (2.0 ** -20, 0.0) if dtype == torch.float64 else (2.0 ** -20,):  # the interpreter is slow
        fp, ip = _params(dtype, thr, 1e-5)
        assert triton_core._self_check(raws, PAIRS, triton_core._fconsts(fp, DEVICE), tuple(ip.tolist()), fp, ip)


def test_a_kernel_wrong_only_on_nan_is_caught_before_nan_data_arrives(monkeypatch):
    # planted bug on a path the user's first data never takes: NaN counted wrong. The first call's data has
    # no NaN; the fixed specimen checked with it does
    real = triton_core._raw_partials
    col = COLUMNS.index("b_nan")

    def nan_bug(raws, *a):
        out = real(raws, *a)
        if any(bool(r.isnan().any()) for r in raws):
            out[:, col] += 1
        return out
    monkeypatch.setattr(triton_core, "_raw_partials", nan_bug)
    g = torch.randn(200, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    pairs = {"vs_golden": (g.float(), g)}
    with pytest.warns(UserWarning, match="disagreed with the eager core"):
        multi_pair_metrics(pairs, **KW)
    assert triton_core._failed


def test_a_wrong_abs_max_kernel_is_caught(monkeypatch):
    monkeypatch.setattr(triton_core, "_abs_max", lambda xs: 0.5)  # planted bug: a constant
    x = torch.tensor([3.0, -4.0, math.inf], device=DEVICE)
    with pytest.warns(UserWarning, match="abs-max kernel disagreed"):
        assert scale.finite_abs_max([x]) == 4.0


def test_a_failing_kernel_falls_back_with_one_warning(monkeypatch):
    def broken(*a):
        raise RuntimeError("no GPU for this kernel")
    monkeypatch.setattr(triton_core, "_raw_partials", broken)
    pairs = _three_pairs(20)
    with pytest.warns(UserWarning, match="unavailable"):
        got = multi_pair_metrics(pairs, **KW)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call stays quiet: the variant is remembered
        multi_pair_metrics(pairs, **KW)
    _same(old.multi_pair_metrics(pairs, **KW)["vs_golden"].values, got["vs_golden"].values, "vs_golden")


def test_unsupported_inputs_small_tensors_and_explicit_chunks_stay_on_the_eager_core(monkeypatch):
    fp, ip = _params(torch.float32, 0.0, 0.0)
    small = torch.ones(50, device=DEVICE)
    monkeypatch.setattr(triton_core, "MIN_ELEMS", 51)
    assert triton_core.walk([small, small], ((0, 1),), DEVICE, torch.float64, fp, ip) is None
    assert triton_core.finite_abs_max([small]) is None
    monkeypatch.setattr(triton_core, "MIN_ELEMS", 0)
    ints = torch.arange(10, device=DEVICE)
    assert triton_core.walk([ints, ints], ((0, 1),), DEVICE, torch.float64, *_params(torch.float32, 0.0, 0.0)) is None
    x = torch.ones(10, device=DEVICE)
    four = ([x, x + 1, x + 2, x + 3], ((0, 1), (2, 3)))  # the kernel reads at most three tensors
    assert triton_core.walk(*four, DEVICE, torch.float64, *_params(torch.float32, 0.0, 0.0)) is None
    fp, ip = _params(torch.float32, 0.0, 0.0)
    fp = fp.clone()  # params() are kept per value: never written
    fp[1] = -1.0  # a negative atol
    assert triton_core.walk([x, x], ((0, 1),), DEVICE, torch.float64, fp, ip) is None
    pairs = _three_pairs(20)
    multi_pair_metrics(pairs, **KW, chunk_elems=7)
    assert not triton_core._checked  # an explicit chunk size keeps the eager core (what the equivalence tests use)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="the interpreter would take minutes: a CUDA machine runs the real kernel")
def test_a_large_tensor_on_cuda_matches_the_per_pair_core():
    pairs = _three_pairs((1 << 22) + 3, seed=9)  # many programs, several tiles each, a tail
    got = multi_pair_metrics(pairs, **KW)
    assert triton_core._checked and not triton_core._failed
    want = old.multi_pair_metrics(pairs, **KW)
    for key in pairs:
        _same(want[key].values, got[key].values, key)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="direct launches exist on CUDA only (the interpreter takes Triton's path)")
def test_direct_launches_give_what_tritons_own_launch_path_gives(monkeypatch):
    """After the first launch per signature the kernels are launched through their compiled handles; both
    paths must give the same partials, bit for bit, also for an unaligned view (another signature)."""
    monkeypatch.setattr(triton_core, "_compiled", {})
    monkeypatch.setattr(triton_core, "_direct", [True])
    g, ref, res = _values((1 << 20) + 9, torch.bfloat16, torch.Generator().manual_seed(4))
    base = [t.to(DEVICE) for t in (res, ref, g)]
    fp, ip = _params(torch.bfloat16, 2.0 ** -20, 1e-5)
    fc, ints = triton_core._fconsts(fp, DEVICE), tuple(ip.tolist())
    for view in (slice(0, None), slice(1, None)):  # aligned, then 2-byte offset
        raws = [t[view] for t in base]
        first = triton_core._raw_partials(raws, PAIRS, fc, ints)
        direct = triton_core._raw_partials(raws, PAIRS, fc, ints)
        monkeypatch.setattr(triton_core, "_direct", [False])
        own = triton_core._raw_partials(raws, PAIRS, fc, ints)
        monkeypatch.setattr(triton_core, "_direct", [True])
        assert triton_core._compiled and triton_core._direct[0]
        assert torch.equal(direct, own) and torch.equal(first, own)


def test_the_direct_launch_key_follows_what_triton_specialises_and_passes_addresses(monkeypatch):
    """The key changes with a constexpr's value, a tensor's dtype and 16-byte alignment and an unspecialised
    int's width, and with nothing else; tensors reach the launcher as their addresses; an int Triton
    specialises itself (not do_not_specialize) gives no key (Triton's own path decides)."""
    from types import SimpleNamespace as P

    kernel = P(params=[P(is_constexpr=False, do_not_specialize=False), P(is_constexpr=False, do_not_specialize=True),
                       P(is_constexpr=True, do_not_specialize=False)])
    monkeypatch.setattr(triton_core, "_kinds", {})
    x = torch.zeros(16, dtype=torch.float32)
    key, plain = triton_core._signature(kernel, (x, 5, 32), 0)
    assert plain == (x.data_ptr(), 5, 32)
    assert triton_core._signature(kernel, (x[8:], 7, 32), 0)[0] == key  # another aligned view, another small int
    others = [(x[1:], 5, 32), (x.double(), 5, 32), (x, 2 ** 40, 32), (x, 5, 64)]
    assert all(triton_core._signature(kernel, args, 0)[0] != key for args in others)
    assert triton_core._signature(kernel, (x, 5, 32), 1)[0] != key  # another device
    assert triton_core._signature(kernel, (x, 5.0, 32), 0) == ((), ())  # a float where an int was unspecialised
    specialised = P(params=[P(is_constexpr=False, do_not_specialize=False)])
    assert triton_core._signature(specialised, (5,), 0) == ((), ())


def test_no_program_runs_more_tiles_than_its_16_bit_counts_hold():
    for n in (1, 10**6, 2**31 + 5, 2**34):
        tiles = -(-n // triton_core.BLOCK)
        progs = triton_core._programs(n, torch.device("cpu"), triton_core.BLOCK, 1)
        assert -(-tiles // progs) <= triton_core.MAX_TILES_PER_PROGRAM < 2 ** 16, n


def test_packed_counts_keep_their_high_field_past_the_sign_bit():
    # planted case: 40000 counted in a lane's high field sets bit 31; an arithmetic shift alone reads it negative
    out = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    _packed_counts_probe[(1,)](out, 40000)
    assert out.tolist() == [3 * 32, 40000 * 32]


def test_a_kept_workspace_serves_the_next_call_with_that_calls_data(monkeypatch):
    """Consecutive calls share their output buffers (no allocation, no views per call): each call's answer
    is its own data's, with NaN/Inf in one call and not in the next (the tile lists the fast pass writes
    change length), a larger tensor grows the workspace and a smaller one then uses part of it."""
    monkeypatch.setattr(triton_core, "_workspaces", {})
    # the interpreter's fixed 3 programs on every device: on a GPU the count follows the tiles (4 vs 10 here),
    # which keys two workspaces and never exercises the grow-then-reuse path this test is about
    monkeypatch.setattr(triton_core, "_programs", lambda n, device, block, per_sm: max(1, min(3, -(-n // block))))
    gen = torch.Generator().manual_seed(21)
    block = triton_core.BLOCK
    small, large = 3 * block + 5, 9 * block + 3  # several tiles per program in the interpreter's 3 programs
    clean = _values(small, torch.bfloat16, gen)
    dirty = [t.clone() for t in _values(small, torch.bfloat16, gen)]
    dirty[2][[1, small - 3]] = math.nan
    big = [t.clone() for t in _values(large, torch.bfloat16, gen)]
    big[1][[0, large // 2]] = math.inf
    for k, (g, ref, res) in enumerate((clean, dirty, clean, big, dirty, clean)):
        _check_partials([res, ref, g], PAIRS, torch.bfloat16, where=f"call {k}")
    assert len(triton_core._workspaces) == 1  # one pair layout: one workspace, grown once
    (ws,) = triton_core._workspaces.values()
    assert ws.tiles >= -(-large // block) // triton_core._programs(large, DEVICE, block, triton_core.PROGRAMS_PER_SM)


def _judged(pairs_of, monkeypatch, at_scale: bool):
    """compare() of each (result, eager, golden), with the thresholds derived on the device or the scale first."""
    from fusecheck.compare import compare
    with monkeypatch.context() as m, warnings.catch_warnings(record=True) as seen:
        if not at_scale:
            m.setattr(cores, "walk_at_scale", lambda *a: None)
        warnings.simplefilter("always")
        got = [compare(r, e, g).to_dict() for r, e, g in pairs_of]
    return got, [str(w.message) for w in seen if "fusecheck:" in str(w.message)]


def test_thresholds_derived_on_the_device_are_the_hosts_and_give_the_same_comparison(monkeypatch):
    """The scale pass and the walk back to back (no wait between them): at scales below 1 (atol and the
    small-value threshold shrink), at 1 and above, every metric and verdict equals the scale-first path's,
    and that path is the one taken (after the first call has checked both kernels)."""
    gen = torch.Generator().manual_seed(31)
    n, dtype = 3 * triton_core.BLOCK + 7, torch.bfloat16
    cases = []
    for s in (3e-4, 1.0, 40.0):
        g = torch.randn(n, dtype=torch.float64, generator=gen) * s
        e = g.to(dtype)
        r = (g * (1 + 1e-2 * torch.randn(n, dtype=torch.float64, generator=gen))).to(dtype)
        r[3] = -r[3]  # one element far off: the max-type checks have something to see
        cases.append((r.to(DEVICE), e.to(DEVICE), g.to(DEVICE)))
    taken = []
    real = triton_core.walk_at_scale
    monkeypatch.setattr(triton_core, "walk_at_scale", lambda *a: taken.append(real(*a)) or taken[-1])
    scale_first, quiet = _judged(cases[:1] + cases, monkeypatch, at_scale=False)  # the first call checks kernels
    monkeypatch.setattr(triton_core, "walk_at_scale", lambda *a: taken.append(real(*a)) or taken[-1])
    derived, quiet2 = _judged(cases[:1] + cases, monkeypatch, at_scale=True)
    assert not quiet + quiet2
    assert taken and all(t is not None for t in taken)  # every call took the device-derived path
    assert derived == scale_first
    assert derived[1]["applied"]["atol"] < scale_first[3]["applied"]["atol"]  # the scale did shrink atol


def test_a_tensor_of_zeros_and_thresholds_that_disagree_take_the_scale_first(monkeypatch):
    """Zeros: the octave base needs the exact-log variant, which the device path does not launch. Planted: a
    device that derives another atol; the host's check refuses it with one warning and the result is the
    scale-first path's."""
    gen = torch.Generator().manual_seed(32)
    n = 4 * triton_core.BLOCK + 1
    g = torch.randn(n, dtype=torch.float64, generator=gen)
    warm = [((g * 1.01).bfloat16().to(DEVICE), g.bfloat16().to(DEVICE), g.to(DEVICE))]
    zeros = torch.zeros(n, dtype=torch.float64)
    case = [((zeros + 1e-3).bfloat16().to(DEVICE), zeros.bfloat16().to(DEVICE), zeros.to(DEVICE))]
    want, _ = _judged(warm + case, monkeypatch, at_scale=False)
    real = triton_core.walk_at_scale
    seen = []
    monkeypatch.setattr(triton_core, "walk_at_scale", lambda *a: seen.append(real(*a)) or seen[-1])
    got, quiet = _judged(warm + case, monkeypatch, at_scale=True)
    assert got == want and not quiet and seen[-1] is None  # zeros: declined, answered by the scale-first path
    assert got[1]["verdict"]["status"] == "FAIL"

    def off_by_one_ulp(*a):
        out = real(*a)
        return None if out is None else (out[0], out[1], [math.nextafter(out[2][0], 1.0)] + out[2][1:])
    monkeypatch.setattr(triton_core, "walk_at_scale", off_by_one_ulp)
    got, warned = _judged(warm, monkeypatch, at_scale=True)
    assert got == want[:1] and len(warned) == 1 and "differ from the host's" in warned[0]
