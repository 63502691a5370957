"""The Triton kernels of the one-pass comparison core (`triton_core.py` drives them; read its docstring).

Imported only where Triton is installed. Plain module-level jit functions: Triton resolves the helpers a
kernel calls through the module's globals.
"""
import triton
import triton.language as tl


INF = tl.constexpr(float("inf"))


@triton.jit
def _pick(x0, x1, x2, I: tl.constexpr):
    if I == 0:
        return x0
    elif I == 1:
        return x1
    else:
        return x2


@triton.jit
def _bits(x):
    if x.dtype.primitive_bitwidth == 16:
        return x.to(tl.int16, bitcast=True)
    elif x.dtype.primitive_bitwidth == 32:
        return x.to(tl.int32, bitcast=True)
    else:
        return x.to(tl.int64, bitcast=True)


@triton.jit
def _floor_log2(x):
    """floor(log2 x) for finite x >= 0 as int32, 0 -> -1 (torch_core._floor_log2)."""
    sub = x < 2.2250738585072014e-308  # fp64 tiny: subnormals are lifted by 2^64 first (exact)
    s = tl.where(sub, x * 18446744073709551616.0, x)
    e = ((s.to(tl.int64, bitcast=True) >> 52) & 2047).to(tl.int32) - 1023
    e = tl.where(sub, e - 64, e)
    return tl.where(x == 0, -1, e)


@triton.jit
def _pow2(n):
    """2.0**n exactly for int32 n >= -1022, inf above 1023 (torch_core._pow2)."""
    field = (tl.minimum(n, 1023) + 1023).to(tl.int64) << 52
    return tl.where(n > 1023, INF, field.to(tl.float64, bitcast=True))


SCALE_LANES = tl.constexpr(256)  # abs-max partials read per step


@triton.jit
def thresholds(fp, scale_ptr, nscale):
    """The thresholds at the tensor's scale, on the device (scale.applied_thresholds, op for op): the largest
    of the `nscale` abs-max partials at scale_ptr; below 1, atol, small_atol and the small-value threshold
    shrink with it; the octave base is floor(log2) of that threshold (-1074 for 0). A scale buffer holding
    1.0 leaves the parameters as given (thresholds the host already scaled). Returns (scale, rtol, atol,
    small threshold, small_atol, octave base)."""
    lanes = tl.arange(0, SCALE_LANES)
    top = tl.zeros([SCALE_LANES], tl.float64)
    for i in range(0, nscale, SCALE_LANES):
        top = _max(top, tl.load(scale_ptr + i + lanes, mask=i + lanes < nscale, other=0.0))
    am = tl.max(top, axis=0)
    rtol = tl.load(fp + 0)
    atol0 = tl.load(fp + 1)
    thr0 = tl.load(fp + 2)
    satol0 = tl.load(fp + 3)
    below = am < 1.0
    atol = tl.where(below, atol0 * am, atol0)
    shrink = tl.where(below & (atol0 != 0.0), atol / atol0, 1.0)  # div.rn.f64, as the host divides
    thr = thr0 * shrink
    obase = tl.where(thr > 0.0, _floor_log2(thr), -1074)
    return am, rtol, atol, thr, tl.where(below, satol0 * am, satol0), obase


@triton.jit
def _two(low, high):
    """Two masks as one int32 increment: low in bits 0-15, high in bits 16-31."""
    return low.to(tl.int32) | (high.to(tl.int32) << 16)


@triton.jit
def _store_two(ptr, packed):
    """The two 16-bit fields of per-lane packed counts, each summed over the lanes (the high field is
    masked after the shift: from 32768 up it sets the sign bit, and int32 >> is arithmetic)."""
    tl.store(ptr, tl.sum(packed & 0xFFFF, axis=0))
    tl.store(ptr + 1, tl.sum((packed >> 16) & 0xFFFF, axis=0))


@triton.jit
def _max(m, x):
    """max for values that are never NaN (all maximised quantities are >= 0, zeros +0): a compare and a
    select, where tl.maximum's NaN-aware max.f64 costs about twice the instructions."""
    return tl.where(x > m, x, m)


@triton.jit
def _octave_records(omax, cand, octave, err, OB: tl.constexpr):
    """Raise each octave's running maximum to the largest candidate error in it, octave by octave."""
    bins = tl.arange(0, OB)
    left = tl.sum(cand.to(tl.int32), axis=0)
    while left > 0:
        o = tl.min(tl.where(cand, octave, OB), axis=0)
        sel = cand & (octave == o)
        m = tl.max(tl.where(sel, err, 0.0), axis=0)
        omax = tl.where(bins == o, tl.maximum(omax, m), omax)
        cand = cand & (octave != o)
        left = tl.sum(cand.to(tl.int32), axis=0)
    return omax


@triton.jit
def _tensor_side(v):
    """One tensor's tile, shared by the pairs that read it: fp64 value, finite mask, NaN/Inf class
    (0 finite, 1 NaN, 2 +Inf, 3 -Inf: metrics.classify_nonfinite)."""
    u = v.to(tl.float64)
    nan = u != u
    inf = tl.abs(u) == INF
    cls = tl.where(nan, 1, tl.where(inf, tl.where(u > 0, 2, 3), 0))
    return u, cls == 0, cls


@triton.jit
def _b_side(u, fin, rtol, atol, thr, eps, mant, min_eb, obase, OCT: tl.constexpr, EXACT_LOG: tl.constexpr):
    """What depends on the expected side B alone, shared by the pairs that judge against it. From |B| as
    loaded: on the positions where both sides are finite it is torch_core._pair's masked |B|; elsewhere each
    use is masked by the pair (or meets a zero difference)."""
    babs = tl.abs(u)
    if EXACT_LOG:  # octaves reach below the normal range (small-value threshold 0 or subnormal)
        lg = _floor_log2(babs)
        eb = tl.maximum(tl.where(babs > 0, lg, min_eb), min_eb)
    else:  # the exponent field: exact for normal |B|; 0 and subnormals give -1023, below every min_eb
        lg = (babs.to(tl.int64, bitcast=True) >> 52).to(tl.int32) - 1023
        eb = tl.maximum(lg, min_eb)
    scale = _pow2(mant - eb)
    octave = tl.minimum(tl.maximum(lg - obase, 0), OCT - 1)
    tol = atol + rtol * babs
    den = tl.where(fin, babs, 0.0) + eps  # finite: no NaN reaches a relative error
    return scale, octave, babs < thr, babs >= thr, tol, den


@triton.jit
def _pair(c, s, m, omax, ua, ub, xa, xb, fa, fb, ca, cb, bside, valid, small_atol, c3, c5, SAME: tl.constexpr):
    """One tile of one pair (torch_core._pair, element by element) added to its per-lane accumulators. Counts
    that imply a non-zero difference need no finite mask (the difference is 0 off the finite positions)."""
    scale, octave, small_b, big_b, tol, den = bside
    finite = fa & fb & valid
    af = tl.where(finite, ua, 0.0)
    bf = tl.where(finite, ub, 0.0)
    d = tl.abs(af - bf)
    rel = d / den  # fp64: div.rn.f64, correctly rounded (tl.math.div_rn is fp32 only)
    ulp = tl.where(d > 0, d * scale, 0.0)
    small = finite & small_b
    big = finite & big_b
    rel_big = tl.where(small, 0.0, rel)
    mnf = ca != cb
    # counts two to a register (16 bits each: a lane counts at most one per tile, <= 65535 tiles per program)
    c = (c[0] + _two(finite, mnf), c[1] + _two(ulp > 1, small), c[2] + _two(small_b & (d > small_atol), rel >= c3),
         c[3] + _two(rel >= c5, (d > tol) | mnf), c[4])
    if SAME:  # else the host reports -1 (dtypes differ)
        c = c[:4] + (c[4] + (valid & (_bits(xa) == _bits(xb))).to(tl.int32),)
    # sums may round differently from torch's (an FMA, another order): "to fp64 rounding", as documented
    s = (tl.fma(d, d, s[0]), s[1] + rel_big, tl.fma(rel_big, rel_big, s[2]), tl.fma(af, bf, s[3]),
         tl.fma(af, af, s[4]), tl.fma(bf, bf, s[5]), s[6] + ulp, s[7] + (af - bf))
    m = (_max(m[0], d), _max(m[1], rel_big), _max(m[2], ulp), _max(m[3], tl.where(small, d, 0.0)))
    cand = big & (d > tl.gather(omax, octave, 0))  # beats its octave's running maximum
    return c, s, m, big, cand, octave, d


@triton.jit
def _store_pair(c, s, m, hist, omax, cnt_ptr, sum_ptr, max_ptr, hist_ptr, omax_ptr, pid, j,
                NC: tl.constexpr, OB: tl.constexpr, WI: tl.constexpr, WF: tl.constexpr):
    """Pair j's partials into program pid's row of the int32 and fp64 outputs (WI and WF entries per program;
    the pointers are the row's sections, triton_core._Layout), so that one torch reduction per buffer and
    kind finishes them over programs."""
    for k in tl.static_range(4):
        _store_two(cnt_ptr + pid * WI + j * NC + 2 * k, c[k])
    tl.store(cnt_ptr + pid * WI + j * NC + 8, tl.sum(c[4], axis=0))
    for k in tl.static_range(len(s)):
        tl.store(sum_ptr + pid * WF + j * len(s) + k, tl.sum(s[k], axis=0))
    for k in tl.static_range(len(m)):
        tl.store(max_ptr + pid * WF + j * len(m) + k, tl.max(m[k], axis=0))
    bins = tl.arange(0, OB)
    tl.store(hist_ptr + pid * WI + j * OB + bins, hist)
    tl.store(omax_ptr + pid * WF + j * OB + bins, omax)


@triton.jit
def _zeros_pair(BLOCK: tl.constexpr, OB: tl.constexpr):
    zi = tl.zeros([BLOCK], tl.int32)
    zf = tl.zeros([BLOCK], tl.float64)
    return ((zi, zi, zi, zi, zi), (zf, zf, zf, zf, zf, zf, zf, zf), (zf, zf, zf, zf),
            tl.zeros([OB], tl.int32), tl.zeros([OB], tl.float64))


@triton.jit
def _load(x0, x1, x2, offs, n, NT: tl.constexpr):
    """One tile of the tensors (x2 read only where there are three): (in range, v0, v1, v2)."""
    valid = offs < n
    v0 = tl.load(x0 + offs, mask=valid, other=0.0)
    v1 = tl.load(x1 + offs, mask=valid, other=0.0)
    v2 = v1
    if NT == 3:
        v2 = tl.load(x2 + offs, mask=valid, other=0.0)
    return valid, v0, v1, v2


@triton.jit
def _tile(pid, t, nprog, tiles_per_prog, ntiles, list_ptr, end, LISTED: tl.constexpr):
    """The index of this program's t-th tile: grid-strided, or its t-th listed one (past the list: `end`, a
    tile with no element in range)."""
    if LISTED:
        return tl.load(list_ptr + pid.to(tl.int64) * tiles_per_prog + t, mask=t < ntiles, other=end)
    else:
        return pid + t * nprog


# sizes and dtype constants not specialised: one compile per dtype/pair variant, not one per size class
@triton.jit(do_not_specialize=("n", "mant", "min_eb", "nscale", "tiles_per_prog"))
def partials_kernel(x0, x1, x2, n, fp, mant, min_eb, scale_ptr, nscale, derived_ptr, tiles_per_prog,
                    cnt_ptr, tcnt_ptr, sum_ptr, max_ptr, hist_ptr, omax_ptr, list_ptr, count_ptr,
                    NT: tl.constexpr, NPAIRS: tl.constexpr, A0: tl.constexpr, B0: tl.constexpr,
                    S0: tl.constexpr, A1: tl.constexpr, B1: tl.constexpr, S1: tl.constexpr,
                    A2: tl.constexpr, B2: tl.constexpr, S2: tl.constexpr, BLOCK: tl.constexpr,
                    OCT: tl.constexpr, OB: tl.constexpr, NC: tl.constexpr, WI: tl.constexpr, WF: tl.constexpr,
                    EXACT_LOG: tl.constexpr, LISTED: tl.constexpr):
    """Per-program partials of up to three pairs (A_i, B_i index x0..x2; S_i: same dtype) over a grid-strided
    range of tiles, or (LISTED) over the count_ptr[pid] tiles that triton_fast_kernel listed for this program.
    Pairs 1 and 2 judged against the same B share its B-side work and, where both sides are finite, one
    octave histogram."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    am, rtol, atol, thr, small_atol, obase = thresholds(fp, scale_ptr, nscale)
    if pid == 0:  # what the host reads back and checks against its own derivation
        tl.store(derived_ptr + 0, am)
        tl.store(derived_ptr + 1, atol)
        tl.store(derived_ptr + 2, thr)
        tl.store(derived_ptr + 3, small_atol)
        tl.store(derived_ptr + 4, obase.to(tl.float64))
    c3 = tl.load(fp + 4)
    c5 = tl.load(fp + 5)
    eps = tl.load(fp + 6)
    SHARE: tl.constexpr = NPAIRS == 3 and B1 == B2
    lanes = tl.arange(0, BLOCK)
    c0, s0, m0, h0, o0 = _zeros_pair(BLOCK, OB)
    c1, s1, m1, h1, o1 = _zeros_pair(BLOCK, OB)
    c2, s2, m2, h2, o2 = _zeros_pair(BLOCK, OB)
    zi = tl.zeros([BLOCK], tl.int32)
    t0, t1, t2 = zi, zi, zi  # per tensor: NaN/Inf count | NaN count << 16
    ntiles = tiles_per_prog
    if LISTED:
        ntiles = tl.load(count_ptr + pid)
    end = tl.cdiv(n, BLOCK)
    # the next tile's values are loaded one iteration ahead: their latency hides behind this tile's work
    offs = _tile(pid, 0, nprog, tiles_per_prog, ntiles, list_ptr, end, LISTED).to(tl.int64) * BLOCK + lanes
    next_valid, next0, next1, next2 = _load(x0, x1, x2, offs, n, NT)
    for t in range(0, ntiles):
        valid, v0, v1, v2 = next_valid, next0, next1, next2
        offs = _tile(pid, t + 1, nprog, tiles_per_prog, ntiles, list_ptr, end, LISTED).to(tl.int64) * BLOCK + lanes
        next_valid, next0, next1, next2 = _load(x0, x1, x2, offs, n, NT)
        u0, f0, k0 = _tensor_side(v0)
        u1, f1, k1 = _tensor_side(v1)
        t0 += _two(k0 != 0, k0 == 1)
        t1 += _two(k1 != 0, k1 == 1)
        if NT == 3:
            u2, f2, k2 = _tensor_side(v2)
            t2 += _two(k2 != 0, k2 == 1)
        else:
            v2, u2, f2, k2 = v1, u1, f1, k1
        bs0 = _b_side(_pick(u0, u1, u2, B0), _pick(f0, f1, f2, B0), rtol, atol, thr, eps, mant, min_eb, obase,
                      OCT, EXACT_LOG)
        c0, s0, m0, g0, r0, q0, d0 = _pair(
            c0, s0, m0, o0, _pick(u0, u1, u2, A0), _pick(u0, u1, u2, B0), _pick(v0, v1, v2, A0),
            _pick(v0, v1, v2, B0), _pick(f0, f1, f2, A0), _pick(f0, f1, f2, B0), _pick(k0, k1, k2, A0),
            _pick(k0, k1, k2, B0), bs0, valid, small_atol, c3, c5, S0)
        h0 += tl.histogram(q0, OB, mask=g0)
        flags = r0.to(tl.int32)
        if NPAIRS > 1:
            bs1 = _b_side(_pick(u0, u1, u2, B1), _pick(f0, f1, f2, B1), rtol, atol, thr, eps, mant, min_eb,
                          obase, OCT, EXACT_LOG)
            c1, s1, m1, g1, r1, q1, d1 = _pair(
                c1, s1, m1, o1, _pick(u0, u1, u2, A1), _pick(u0, u1, u2, B1), _pick(v0, v1, v2, A1),
                _pick(v0, v1, v2, B1), _pick(f0, f1, f2, A1), _pick(f0, f1, f2, B1), _pick(k0, k1, k2, A1),
                _pick(k0, k1, k2, B1), bs1, valid, small_atol, c3, c5, S1)
            flags = flags | (r1.to(tl.int32) << 1)
            if not SHARE:
                h1 += tl.histogram(q1, OB, mask=g1)
        if NPAIRS > 2:
            if SHARE:
                bs2 = bs1
            else:
                bs2 = _b_side(_pick(u0, u1, u2, B2), _pick(f0, f1, f2, B2), rtol, atol, thr, eps, mant, min_eb,
                              obase, OCT, EXACT_LOG)
            c2, s2, m2, g2, r2, q2, d2 = _pair(
                c2, s2, m2, o2, _pick(u0, u1, u2, A2), _pick(u0, u1, u2, B2), _pick(v0, v1, v2, A2),
                _pick(v0, v1, v2, B2), _pick(f0, f1, f2, A2), _pick(f0, f1, f2, B2), _pick(k0, k1, k2, A2),
                _pick(k0, k1, k2, B2), bs2, valid, small_atol, c3, c5, S2)
            flags = flags | (r2.to(tl.int32) << 2)
            if SHARE:  # the same octaves: one histogram where both count, the rest (NaN/Inf on one A) below
                common = tl.histogram(q1, OB, mask=g1 & g2)
                h1 += common
                h2 += common
                flags = flags | ((g1 != g2).to(tl.int32) << 3)
            else:
                h2 += tl.histogram(q2, OB, mask=g2)
        records = tl.reduce_or(flags, axis=0)  # one block reduction per tile for all pairs
        if records != 0:
            if (records & 1) != 0:
                o0 = _octave_records(o0, r0, q0, d0, OB)
            if NPAIRS > 1:
                if (records & 2) != 0:
                    o1 = _octave_records(o1, r1, q1, d1, OB)
            if NPAIRS > 2:
                if (records & 4) != 0:
                    o2 = _octave_records(o2, r2, q2, d2, OB)
                if SHARE:
                    if (records & 8) != 0:
                        h1 += tl.histogram(q1, OB, mask=g1 & ~g2)
                        h2 += tl.histogram(q2, OB, mask=g2 & ~g1)
    _store_pair(c0, s0, m0, h0, o0, cnt_ptr, sum_ptr, max_ptr, hist_ptr, omax_ptr, pid, 0, NC, OB, WI, WF)
    if NPAIRS > 1:
        _store_pair(c1, s1, m1, h1, o1, cnt_ptr, sum_ptr, max_ptr, hist_ptr, omax_ptr, pid, 1, NC, OB, WI, WF)
    if NPAIRS > 2:
        _store_pair(c2, s2, m2, h2, o2, cnt_ptr, sum_ptr, max_ptr, hist_ptr, omax_ptr, pid, 2, NC, OB, WI, WF)
    tb = pid * WI
    _store_two(tcnt_ptr + tb, t0)
    _store_two(tcnt_ptr + tb + 2, t1)
    _store_two(tcnt_ptr + tb + 4, t2)


@triton.jit(do_not_specialize=("n", "tiles_per_prog"))  # one compile per dtype variant, not per size
def abs_max_kernel(x0, x1, n, tiles_per_prog, out_ptr, NT: tl.constexpr, BLOCK: tl.constexpr):
    """Largest finite |x| over one or two same-shape tensors, per program (scale.finite_abs_max)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    m1 = tl.zeros([BLOCK], tl.float64)
    for t in range(0, tiles_per_prog):
        offs = (pid + t * nprog).to(tl.int64) * BLOCK + lanes
        valid = offs < n
        a0 = tl.abs(tl.load(x0 + offs, mask=valid, other=0.0).to(tl.float64))
        m1 = _max(m1, tl.where(a0 < INF, a0, 0.0))  # NaN and Inf: 0
        if NT == 2:
            a1 = tl.abs(tl.load(x1 + offs, mask=valid, other=0.0).to(tl.float64))
            m1 = _max(m1, tl.where(a1 < INF, a1, 0.0))
    tl.store(out_ptr + pid, tl.max(m1, axis=0))


@triton.jit(do_not_specialize=("rows",))
def finish_kernel(ints_ptr, floats_ptr, out_ptr, rows, WI: tl.constexpr, WF: tl.constexpr, NSUM: tl.constexpr,
                  RB: tl.constexpr, CB: tl.constexpr):
    """The per-program rows reduced over programs, in one launch and a fixed order (the same sums on every
    run): out[:WI] the int32 columns' sums, out[WI:WI + NSUM] the fp64 sums, the rest the fp64 maxima (all
    >= 0, never NaN: _max). The first cdiv(WI, CB) programs take CB int columns each, the others CB fp64
    columns."""
    pid = tl.program_id(0)
    PI: tl.constexpr = (WI + CB - 1) // CB
    rr = tl.arange(0, RB)
    if pid < PI:
        c = pid * CB + tl.arange(0, CB)
        acc = tl.zeros([CB], tl.int64)
        for r0 in range(0, rows, RB):
            r = r0 + rr
            v = tl.load(ints_ptr + r[:, None].to(tl.int64) * WI + c[None, :],
                        mask=(r[:, None] < rows) & (c[None, :] < WI), other=0)
            acc += tl.sum(v.to(tl.int64), axis=0)
        tl.store(out_ptr + c, acc.to(tl.float64), mask=c < WI)
    else:
        c = (pid - PI) * CB + tl.arange(0, CB)
        s = tl.zeros([CB], tl.float64)
        m = tl.zeros([CB], tl.float64)
        for r0 in range(0, rows, RB):
            r = r0 + rr
            v = tl.load(floats_ptr + r[:, None].to(tl.int64) * WF + c[None, :],
                        mask=(r[:, None] < rows) & (c[None, :] < WF), other=0.0)
            s += tl.sum(v, axis=0)
            m = _max(m, tl.max(v, axis=0))
        tl.store(out_ptr + WI + c, tl.where(c < NSUM, s, m), mask=c < WF)
