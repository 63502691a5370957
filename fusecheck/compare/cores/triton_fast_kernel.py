"""The fast pass of the Triton comparison core: every finite tile here, the others listed for the exact kernel.

Why: the exact kernel (`triton_kernels.partials_kernel`) pays on every element for what few elements need:
NaN/Inf classes and masks, three correctly rounded divisions, per-lane maxima. Measured on the H200 it ran at
about 3x the floor of its own arithmetic (docs/benchmarks.md). Here a tile of 32 elements is *ordinary* when
every lane is in range and every value of every tensor is finite; an ordinary tile gives the exact kernel's
counts and maxima bit for bit, and the same sums to fp64 rounding, with less work per element:
  - the relative error is `q = d * r`, r the correctly rounded reciprocal of `|B| + eps`, one per expected
    side and shared by the pairs judged against it. q is within 2^-51 (relative) of the correctly rounded
    `d / den`. On a lane where that could move a count across 1e-3 or 5e-3 (q within 2^-45 of one) or where
    d * r could overflow, the tile divides exactly (rare: a flag in the tile's one block reduction);
  - maxima are per-program records, not per-lane maxima. A lane that could beat one makes the tile raise it
    exactly (`d / den` on the tile's lanes). For the relative error that test is `d > T (1 - 2^-45) den`,
    which no record escapes: RN(d / den) > T implies d > T den, and T (1 - 2^-45) den rounds below T den
    while it is normal (T >= 2^-900; below, the test is d > 0). After the first tiles records are rare (a
    record in a stream of draws), so that branch is too;
  - the per-octave maxima are the exact kernel's records, unchanged; the two golden pairs share one octave
    histogram (finite tiles: they count the same elements).
Every other tile's index (a NaN/Inf anywhere in it, or the tail) is written to this program's list (capacity:
its own tiles, so it never overflows), and `partials_kernel` (LISTED) takes exactly those: together the two
launches cover each tile once, and their per-program partials are reduced together.
"""
import triton
import triton.language as tl

from fusecheck.compare.cores.triton_kernels import (_b_side, _bits, _load, _octave_records, _pick, _store_pair, _two,
                                                    thresholds)

INF = tl.constexpr(float("inf"))


@triton.jit
def _finite(v):
    """Finite, in the loaded dtype (fp16/bf16 compare as fp32: exact)."""
    if v.dtype == tl.float64:
        return tl.abs(v) < INF
    else:
        return tl.abs(v.to(tl.float32)) < INF


@triton.jit
def _expected(u, rtol, atol, thr, eps, mant, min_eb, obase, OCT: tl.constexpr, EXACT_LOG: tl.constexpr):
    """The expected side B of a finite tile: triton_kernels._b_side's values, plus the reciprocal of den."""
    bside = _b_side(u, True, rtol, atol, thr, eps, mant, min_eb, obase, OCT, EXACT_LOG)
    return bside + (1.0 / bside[5],)


@triton.jit
def _measure(ua, ub, bside, t, omax, consts, ULP_SAFE: tl.constexpr):
    """One pair on a tile: |A - B|, the relative error through the reciprocal, the ULP error, and per lane the
    flags (bit 0, odd: the relative error lies where it could count otherwise than the correctly rounded one,
    or d * r could overflow; bit 1: it could beat one of the four records; bit 2: its octave's record)."""
    scale, octave, small_b, big_b, tol, den, r = bside
    small_atol, c3, c5, c3lo, c3hi, c5lo, c5hi, huge, tiny, slack = consts
    tabs, trel, tulp, tsmall, trel_lo = t
    d = tl.abs(ua - ub)
    q = d * r
    if ULP_SAFE:  # 2^(mant - eb) finite: 0 * scale is 0
        ulp = d * scale
    else:
        ulp = tl.where(d > 0, d * scale, 0.0)
    odd = ((q >= c3lo) & (q < c3hi)) | ((q >= c5lo) & (q < c5hi)) | (q >= huge)
    beats = (d > tabs) | (ulp > tulp) | (small_b & (d > tsmall)) | (big_b & (d > trel_lo * den))
    in_octave = big_b & (d > tl.gather(omax, octave, 0))
    return d, q, ulp, odd.to(tl.int32) | (beats.to(tl.int32) << 1) | (in_octave.to(tl.int32) << 2)


@triton.jit
def _accumulate(c, s, t, omax, records, odd, d, q, ulp, ua, ub, xa, xb, bside, consts, SAME: tl.constexpr,
                OB: tl.constexpr):
    """One pair of an ordinary tile into its per-lane counts and sums (a_sq/b_sq are per tensor, n_finite per
    tile), and its records where `records` (this pair's flags over the tile) says a lane could beat one.
    Where a lane's relative error is odd (`_measure`'s bit 0; `records` bit 0: in some lane of some pair) it
    is the correctly rounded one."""
    scale, octave, small_b, big_b, tol, den, r = bside
    small_atol, c3, c5, c3lo, c3hi, c5lo, c5hi, huge, tiny, slack = consts
    if (records & 1) != 0:
        q = tl.where((odd & 1) != 0, d / den, q)
    rel_big = tl.where(small_b, 0.0, q)
    c = (c[0], c[1] + _two(ulp > 1, small_b), c[2] + _two(small_b & (d > small_atol), q >= c3),
         c[3] + _two(q >= c5, d > tol), c[4])
    if SAME:
        c = c[:4] + (c[4] + (_bits(xa) == _bits(xb)).to(tl.int32),)
    s = (tl.fma(d, d, s[0]), s[1] + rel_big, tl.fma(rel_big, rel_big, s[2]), tl.fma(ua, ub, s[3]), s[4] + ulp,
         s[5] + (ua - ub))
    if records != 0:
        if (records & 2) != 0:
            t = _new_records(t, d, ulp, bside, tiny, slack)
        if (records & 4) != 0:  # _measure's bit 2 again: recomputed on this rare tile, not kept live in registers
            omax = _octave_records(omax, big_b & (d > tl.gather(omax, octave, 0)), octave, d, OB)
    return c, s, t, omax


@triton.jit
def _new_records(t, d, ulp, bside, tiny, slack):
    """The four maxima raised exactly by this tile (the relative error correctly rounded, as the exact kernel)."""
    scale, octave, small_b, big_b, tol, den, r = bside
    tabs, trel, tulp, tsmall, trel_lo = t
    tabs = tl.maximum(tabs, tl.max(d, axis=0))
    tulp = tl.maximum(tulp, tl.max(ulp, axis=0))
    tsmall = tl.maximum(tsmall, tl.max(tl.where(small_b, d, 0.0), axis=0))
    trel = tl.maximum(trel, tl.max(tl.where(big_b, d / den, 0.0), axis=0))
    trel_lo = tl.where(trel >= tiny, trel * slack, 0.0)
    return tabs, trel, tulp, tsmall, trel_lo


@triton.jit
def _store_fast(c, ordinary, s, t, hist, omax, tsq_a, tsq_b, cnt_ptr, sum_ptr, max_ptr, hist_ptr, omax_ptr, pid, j,
                NC: tl.constexpr, OB: tl.constexpr, WI: tl.constexpr, WF: tl.constexpr):
    """This program's partials of one pair, in partials_kernel's layout (_store_pair)."""
    c = (c[0] + ordinary,) + c[1:]  # every lane of an ordinary tile is finite in both: n_finite, no NaN mismatch
    zf = tl.zeros_like(s[0])  # the records as lanes: their maximum over lanes is themselves
    _store_pair(c, (s[0], s[1], s[2], s[3], tsq_a, tsq_b, s[4], s[5]), (zf + t[0], zf + t[1], zf + t[2], zf + t[3]),
                hist, omax, cnt_ptr, sum_ptr, max_ptr, hist_ptr, omax_ptr, pid, j, NC, OB, WI, WF)


@triton.jit
def _fresh(BLOCK: tl.constexpr, OB: tl.constexpr):
    zi = tl.zeros([BLOCK], tl.int32)
    zf = tl.zeros([BLOCK], tl.float64)
    z = tl.sum(zf, axis=0)  # an fp64 scalar 0 (a Python 0.0 would be typed fp32)
    return ((zi, zi, zi, zi, zi), (zf, zf, zf, zf, zf, zf), (z, z, z, z, z), tl.zeros([OB], tl.int32),
            tl.zeros([OB], tl.float64))


# sizes and dtype constants not specialised: one compile per dtype/pair variant, not one per size class
@triton.jit(do_not_specialize=("n", "mant", "min_eb", "nscale", "tiles_per_prog"))
def fast_kernel(x0, x1, x2, n, fp, mant, min_eb, scale_ptr, nscale, derived_ptr, tiles_per_prog,
                cnt_ptr, tcnt_ptr, sum_ptr, max_ptr, hist_ptr, omax_ptr, list_ptr, count_ptr,
                NT: tl.constexpr, NPAIRS: tl.constexpr, A0: tl.constexpr, B0: tl.constexpr,
                S0: tl.constexpr, A1: tl.constexpr, B1: tl.constexpr, S1: tl.constexpr,
                A2: tl.constexpr, B2: tl.constexpr, S2: tl.constexpr, BLOCK: tl.constexpr,
                OCT: tl.constexpr, OB: tl.constexpr, NC: tl.constexpr, WI: tl.constexpr, WF: tl.constexpr,
                EXACT_LOG: tl.constexpr, ULP_SAFE: tl.constexpr):
    """partials_kernel's outputs over this program's ordinary tiles; the others' indices go to
    list_ptr[pid * tiles_per_prog:] and their number to count_ptr[pid]."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    _, rtol, atol, thr, small_atol, obase = thresholds(fp, scale_ptr, nscale)  # the exact kernel stores them
    eps = tl.load(fp + 6)
    # small_atol, c3, c5, the bands around c3 and c5, the overflow bound of d * r, the record bound's floor, slack
    consts = (small_atol, tl.load(fp + 4), tl.load(fp + 5), tl.load(fp + 7), tl.load(fp + 8), tl.load(fp + 9),
              tl.load(fp + 10), tl.load(fp + 11), tl.load(fp + 12), tl.load(fp + 13))
    SHARE: tl.constexpr = NPAIRS == 3 and B1 == B2  # the golden pairs count the same elements per octave
    lanes = tl.arange(0, BLOCK)
    c0, s0, t0, h0, o0 = _fresh(BLOCK, OB)
    c1, s1, t1, h1, o1 = _fresh(BLOCK, OB)
    c2, s2, t2, h2, o2 = _fresh(BLOCK, OB)
    zf = tl.zeros([BLOCK], tl.float64)
    q0, q1, q2 = zf, zf, zf  # per tensor: sum of squares (a_sq/b_sq of every pair reading it)
    listed = pid * 0
    ordinary = pid * 0
    offs = pid.to(tl.int64) * BLOCK + lanes
    next_valid, next0, next1, next2 = _load(x0, x1, x2, offs, n, NT)
    for t in range(0, tiles_per_prog):
        valid, v0, v1, v2 = next_valid, next0, next1, next2
        tile = pid + t * nprog
        offs = (tile + nprog).to(tl.int64) * BLOCK + lanes
        next_valid, next0, next1, next2 = _load(x0, x1, x2, offs, n, NT)
        if tile.to(tl.int64) * BLOCK < n:
            fin = valid & _finite(v0) & _finite(v1)
            if NT == 3:
                fin = fin & _finite(v2)
            u0 = v0.to(tl.float64)
            u1 = v1.to(tl.float64)
            u2 = v2.to(tl.float64)
            bs0 = _expected(_pick(u0, u1, u2, B0), rtol, atol, thr, eps, mant, min_eb, obase, OCT, EXACT_LOG)
            d0, r0, ulp0, f0 = _measure(_pick(u0, u1, u2, A0), _pick(u0, u1, u2, B0), bs0, t0, o0, consts, ULP_SAFE)
            # the tile's flags: bit 0 NaN/Inf or tail; bits 1-2, 3-4, 5-6 the pairs' records; bit 7 an odd lane
            flags = (~fin).to(tl.int32) | (f0 & 6) | ((f0 & 1) << 7)
            bs1, bs2 = bs0, bs0
            d1, r1, ulp1, f1, d2, r2, ulp2, f2 = d0, r0, ulp0, f0, d0, r0, ulp0, f0
            if NPAIRS > 1:
                bs1 = _expected(_pick(u0, u1, u2, B1), rtol, atol, thr, eps, mant, min_eb, obase, OCT, EXACT_LOG)
                d1, r1, ulp1, f1 = _measure(_pick(u0, u1, u2, A1), _pick(u0, u1, u2, B1), bs1, t1, o1, consts,
                                            ULP_SAFE)
                flags = flags | ((f1 & 6) << 2) | ((f1 & 1) << 7)
            if NPAIRS > 2:
                if SHARE:
                    bs2 = bs1
                else:
                    bs2 = _expected(_pick(u0, u1, u2, B2), rtol, atol, thr, eps, mant, min_eb, obase, OCT, EXACT_LOG)
                d2, r2, ulp2, f2 = _measure(_pick(u0, u1, u2, A2), _pick(u0, u1, u2, B2), bs2, t2, o2, consts,
                                            ULP_SAFE)
                flags = flags | ((f2 & 6) << 4) | ((f2 & 1) << 7)
            flags = tl.reduce_or(flags, axis=0)  # the one block reduction per tile
            if (flags & 1) != 0:  # a NaN/Inf or the tail: the exact kernel's tile
                tl.store(list_ptr + pid.to(tl.int64) * tiles_per_prog + listed, tile)
                listed += 1
            else:
                ordinary += 1
                q0 = tl.fma(u0, u0, q0)
                q1 = tl.fma(u1, u1, q1)
                if NT == 3:
                    q2 = tl.fma(u2, u2, q2)
                odd = flags >> 7
                c0, s0, t0, o0 = _accumulate(c0, s0, t0, o0, (flags & 6) | odd, f0, d0, r0, ulp0, _pick(u0, u1, u2, A0),
                                             _pick(u0, u1, u2, B0), _pick(v0, v1, v2, A0), _pick(v0, v1, v2, B0),
                                             bs0, consts, S0, OB)
                h0 += tl.histogram(bs0[1], OB, mask=bs0[3])
                if NPAIRS > 1:
                    c1, s1, t1, o1 = _accumulate(c1, s1, t1, o1, ((flags >> 2) & 6) | odd, f1, d1, r1, ulp1,
                                                 _pick(u0, u1, u2, A1), _pick(u0, u1, u2, B1), _pick(v0, v1, v2, A1),
                                                 _pick(v0, v1, v2, B1), bs1, consts, S1, OB)
                    h1 += tl.histogram(bs1[1], OB, mask=bs1[3])
                if NPAIRS > 2:
                    c2, s2, t2, o2 = _accumulate(c2, s2, t2, o2, ((flags >> 4) & 6) | odd, f2, d2, r2, ulp2,
                                                 _pick(u0, u1, u2, A2), _pick(u0, u1, u2, B2), _pick(v0, v1, v2, A2),
                                                 _pick(v0, v1, v2, B2), bs2, consts, S2, OB)
                    if not SHARE:  # else the same elements per octave as pair 1 (stored from h1)
                        h2 += tl.histogram(bs2[1], OB, mask=bs2[3])
    _store_fast(c0, ordinary, s0, t0, h0, o0, _pick(q0, q1, q2, A0), _pick(q0, q1, q2, B0), cnt_ptr, sum_ptr,
                max_ptr, hist_ptr, omax_ptr, pid, 0, NC, OB, WI, WF)
    if NPAIRS > 1:
        _store_fast(c1, ordinary, s1, t1, h1, o1, _pick(q0, q1, q2, A1), _pick(q0, q1, q2, B1), cnt_ptr, sum_ptr,
                    max_ptr, hist_ptr, omax_ptr, pid, 1, NC, OB, WI, WF)
    if NPAIRS > 2:
        if SHARE:
            h2 = h1
        _store_fast(c2, ordinary, s2, t2, h2, o2, _pick(q0, q1, q2, A2), _pick(q0, q1, q2, B2), cnt_ptr, sum_ptr,
                    max_ptr, hist_ptr, omax_ptr, pid, 2, NC, OB, WI, WF)
    for k in tl.static_range(6):
        tl.store(tcnt_ptr + pid * WI + k, 0)
    tl.store(count_ptr + pid, listed)
