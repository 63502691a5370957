/* fusecheck's CPU comparison core (loaded by cpu_core.py): every accumulator of every pair, one read.
 *
 * Each call reduces elements [start, end) of up to 3 same-length flat tensors. They are read in blocks of
 * BLOCK elements, each block upcast once to fp64 into an L1-resident buffer, then reduced for every pair
 * by one vectorisable loop (`#pragma omp simd`, no OpenMP runtime) plus a scalar loop for the per-octave
 * histogram. Block results are added to the call's totals (two-level summation).
 *
 * Every per-element quantity is the one fused._pair computes, in the same fp64 operations and order, so
 * counts and maxima are bit-identical and sums differ by summation order only. Built without
 * -ffast-math and with -ffp-contract=off: no FMA may fuse `atol + rtol * |b|` or a square into a sum.
 * Maxima start at +0 and take only values >= 0 that are never NaN (|a-b| of finite operands, divided by
 * |b| + eps > 0, or times a power of two), so `v > m ? v : m` is torch's amax here.
 */
#include <stdint.h>
#include <string.h>

#define BLOCK 1024
#define OCTAVES 40
#define EPS 0x1p-52 /* torch.finfo(torch.float64).eps */

enum kind { K_F64 = 0, K_F32 = 1, K_F16 = 2, K_BF16 = 3 };

/* The slots of one pair's row, in this order (cpu_core.SLOTS names them). */
enum slot {
    S_N_FINITE, S_A_NONFINITE, S_B_NONFINITE, S_B_NAN, S_NONFINITE_MISMATCH, S_SQ_ERR, S_MAX_ABS, S_MAX_REL,
    S_SUM_REL, S_SQ_REL, S_N_BIG, S_DOT, S_A_SQ, S_B_SQ, S_ULP_MAX, S_ULP_SUM, S_ULP_GT1, S_SMALL_N,
    S_SMALL_ERR, S_SMALL_MAX_ABS, S_REL_LT_1E3, S_REL_LT_5E3, S_MISMATCHES, S_BITS_EQUAL, S_SUM_ERR,
    S_OCTAVE_N, S_OCTAVE_MAX_ABS = S_OCTAVE_N + OCTAVES, N_SLOTS = S_OCTAVE_MAX_ABS + OCTAVES
};

int fc_n_slots(void) { return N_SLOTS; }
int fc_octaves(void) { return OCTAVES; }

static inline double from_bits(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
static inline uint64_t to_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

/* fp16 bits -> fp64, exactly (built from the bits: no fp32 subnormal on the way). */
static inline double half_to_double(uint16_t h) {
    uint64_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double normal = from_bits(((e + 1008) << 52) | (m << 42)); /* 1023 - 15 */
    double special = from_bits((0x7ffULL << 52) | (m << 42));  /* Inf, NaN */
    double sub = (double)m * 0x1p-24;
    double mag = e == 0 ? sub : (e == 31 ? special : normal);
    return from_bits(to_bits(mag) | ((uint64_t)(h & 0x8000) << 48));
}

/* bf16 bits -> fp64, exactly (bf16 is the top half of an fp32; fp32 -> fp64 built from bits too). */
static inline double bf16_to_double(uint16_t h) {
    uint64_t e = (h >> 7) & 0xff, m = h & 0x7f;
    double normal = from_bits(((e + 896) << 52) | (m << 45)); /* 1023 - 127 */
    double special = from_bits((0x7ffULL << 52) | (m << 45));
    double sub = (double)m * 0x1p-133;                          /* 2^-126 * 2^-7 */
    double mag = e == 0 ? sub : (e == 255 ? special : normal);
    return from_bits(to_bits(mag) | ((uint64_t)(h & 0x8000) << 48));
}

static inline double f32_to_double(uint32_t u) {
    uint64_t e = (u >> 23) & 0xff, m = u & 0x7fffff;
    double normal = from_bits(((e + 896) << 52) | (m << 29));
    double special = from_bits((0x7ffULL << 52) | (m << 29));
    double sub = (double)m * 0x1p-149;
    double mag = e == 0 ? sub : (e == 255 ? special : normal);
    return from_bits(to_bits(mag) | ((uint64_t)(u & 0x80000000u) << 32));
}

/* One block of a tensor as fp64: a pointer into it (fp64) or into `buf` (the upcast copy). */
static const double *load(int kind, const void *p, int64_t off, int64_t n, double *restrict buf) {
    int64_t i;
    switch (kind) {
    case K_F64:
        return (const double *)p + off;
    case K_F32: {
        const uint32_t *s = (const uint32_t *)p + off;
#pragma omp simd
        for (i = 0; i < n; i++) buf[i] = f32_to_double(s[i]);
        break;
    }
    case K_F16: {
        const uint16_t *s = (const uint16_t *)p + off;
#pragma omp simd
        for (i = 0; i < n; i++) buf[i] = half_to_double(s[i]);
        break;
    }
    default: {
        const uint16_t *s = (const uint16_t *)p + off;
#pragma omp simd
        for (i = 0; i < n; i++) buf[i] = bf16_to_double(s[i]);
    }
    }
    return buf;
}

static int64_t width(int kind) { return kind == K_F64 ? 8 : kind == K_F32 ? 4 : 2; }

/* Elements with identical bits (same kind only). */
static double bits_equal(int kind, const void *pa, const void *pb, int64_t off, int64_t n) {
    int64_t i, c = 0;
    if (width(kind) == 8) {
        const uint64_t *a = (const uint64_t *)pa + off, *b = (const uint64_t *)pb + off;
#pragma omp simd reduction(+ : c)
        for (i = 0; i < n; i++) c += a[i] == b[i];
    } else if (width(kind) == 4) {
        const uint32_t *a = (const uint32_t *)pa + off, *b = (const uint32_t *)pb + off;
#pragma omp simd reduction(+ : c)
        for (i = 0; i < n; i++) c += a[i] == b[i];
    } else {
        const uint16_t *a = (const uint16_t *)pa + off, *b = (const uint16_t *)pb + off;
#pragma omp simd reduction(+ : c)
        for (i = 0; i < n; i++) c += a[i] == b[i];
    }
    return (double)c;
}

/* floor(log2 x) for finite x >= 0; 0 -> -1 (fused._floor_log2). */
static inline int64_t floor_log2(double x) {
    int sub = x < 0x1p-1022;
    double s = sub ? x * 0x1p64 : x;
    int64_t e = (int64_t)((to_bits(s) >> 52) & 0x7ff) - 1023;
    e = sub ? e - 64 : e;
    return x == 0 ? -1 : e;
}

/* 2^n exactly (fused._pow2): Inf above fp64's largest exponent. */
static inline double pow2(int64_t n) {
    int64_t c = n > 1023 ? 1023 : n;
    double p = from_bits((uint64_t)(c + 1023) << 52);
    return n > 1023 ? __builtin_inf() : p;
}

typedef struct {
    double rtol, atol, small_threshold, small_atol;
    int64_t mant, min_eb, octave_base;
} params;

/* One pair over one block: scalar slots added to (or maxed into) `row`, octaves into `row` too.
 * `finite_only` (a constant at each call): both blocks hold finite values only, so the NaN/Inf masks fold
 * away (the same expressions with fa = fb = 1, na = nb = 0; the common case, ~1/3 faster). */
static inline __attribute__((always_inline)) void
pair_block_impl(const double *restrict A, const double *restrict B, int64_t n, const params *P,
                double *restrict row, const int finite_only) {
    double n_finite = 0, a_nf = 0, b_nf = 0, b_nan = 0, nf_mis = 0, sq_err = 0, max_abs = 0, max_rel = 0;
    double sum_rel = 0, sq_rel = 0, n_big = 0, dot = 0, a_sq = 0, b_sq = 0, ulp_max = 0, ulp_sum = 0;
    double ulp_gt1 = 0, small_n = 0, small_err = 0, small_max = 0, rel3 = 0, rel5 = 0, mism = 0, sum_err = 0;
    const double rtol = P->rtol, atol = P->atol, thr = P->small_threshold, small_atol = P->small_atol;
    const int64_t mant = P->mant, min_eb = P->min_eb, obase = P->octave_base;
    int32_t oct[BLOCK];
    double err[BLOCK];
    int64_t i;
#pragma omp simd reduction(+ : n_finite, a_nf, b_nf, b_nan, nf_mis, sq_err, sum_rel, sq_rel, n_big, dot, \
                           a_sq, b_sq, ulp_sum, ulp_gt1, small_n, small_err, rel3, rel5, mism, sum_err)          \
    reduction(max : max_abs, max_rel, ulp_max, small_max)
    for (i = 0; i < n; i++) {
        double a = A[i], b = B[i];
        int na = finite_only ? 0 : a != a, nb = finite_only ? 0 : b != b;
        int fa = finite_only ? 1 : (a - a) == 0; /* finite: Inf - Inf and NaN - NaN are NaN */
        int fb = finite_only ? 1 : (b - b) == 0;
        int fin = fa & fb;
        double af = fin ? a : 0.0, bf = fin ? b : 0.0;
        double d = __builtin_fabs(af - bf);
        double babs = __builtin_fabs(bf);
        double rel = d / (babs + EPS);
        int64_t log2b = floor_log2(babs);
        int64_t eb = babs > 0 ? log2b : min_eb;
        eb = eb > min_eb ? eb : min_eb;
        double ulp = d > 0 ? d * pow2(mant - eb) : 0.0;
        int small = fin & (babs < thr);
        int big = fin & !small;
        double rel_big = small ? 0.0 : rel;
        double err_big = small ? 0.0 : d;
        int mis_nf = (na ^ nb) | (!(fin | na | nb) & (a != b));
        int64_t o = log2b - obase;
        o = o < 0 ? 0 : (o > OCTAVES - 1 ? OCTAVES - 1 : o);
        oct[i] = big ? (int32_t)o : OCTAVES; /* non-big elements add 0 to a count and +0 to a maximum */
        err[i] = err_big;
        n_finite += fin;
        a_nf += !fa;
        b_nf += !fb;
        b_nan += nb;
        nf_mis += mis_nf;
        sq_err += d * d;
        sum_err += af - bf;
        max_abs = d > max_abs ? d : max_abs;
        max_rel = rel_big > max_rel ? rel_big : max_rel;
        sum_rel += rel_big;
        sq_rel += rel_big * rel_big;
        n_big += big;
        dot += af * bf;
        a_sq += af * af;
        b_sq += bf * bf;
        ulp_max = ulp > ulp_max ? ulp : ulp_max;
        ulp_sum += ulp;
        ulp_gt1 += ulp > 1;
        small_n += small;
        small_err += small & (d > small_atol);
        double sm = small ? d : 0.0;
        small_max = sm > small_max ? sm : small_max;
        rel3 += fin & (rel < 1e-3);
        rel5 += fin & (rel < 5e-3);
        mism += (fin & (d > atol + rtol * babs)) | mis_nf;
    }
    /* The octave histogram, in four interleaved copies: consecutive elements of one octave would otherwise
     * each wait for the previous one's store (a ~25% slower loop). Slot OCTAVES collects non-big elements. */
    int32_t cnt4[4][OCTAVES + 1] = {{0}};
    double mx4[4][OCTAVES + 1] = {{0}};
    for (i = 0; i + 3 < n; i += 4) {
        for (int k = 0; k < 4; k++) {
            int32_t o = oct[i + k];
            cnt4[k][o] += 1;
            double e = err[i + k];
            mx4[k][o] = e > mx4[k][o] ? e : mx4[k][o];
        }
    }
    for (; i < n; i++) {
        int32_t o = oct[i];
        cnt4[0][o] += 1;
        mx4[0][o] = err[i] > mx4[0][o] ? err[i] : mx4[0][o];
    }
    double cnt[OCTAVES + 1], mx[OCTAVES + 1];
    for (i = 0; i <= OCTAVES; i++) {
        cnt[i] = (double)(cnt4[0][i] + cnt4[1][i] + cnt4[2][i] + cnt4[3][i]);
        double m01 = mx4[0][i] > mx4[1][i] ? mx4[0][i] : mx4[1][i];
        double m23 = mx4[2][i] > mx4[3][i] ? mx4[2][i] : mx4[3][i];
        mx[i] = m01 > m23 ? m01 : m23;
    }
    double add[] = {n_finite, a_nf, b_nf, b_nan, nf_mis, sq_err};
    for (i = 0; i < 6; i++) row[S_N_FINITE + i] += add[i];
    row[S_MAX_ABS] = max_abs > row[S_MAX_ABS] ? max_abs : row[S_MAX_ABS];
    row[S_MAX_REL] = max_rel > row[S_MAX_REL] ? max_rel : row[S_MAX_REL];
    row[S_SUM_REL] += sum_rel;
    row[S_SQ_REL] += sq_rel;
    row[S_N_BIG] += n_big;
    row[S_DOT] += dot;
    row[S_A_SQ] += a_sq;
    row[S_B_SQ] += b_sq;
    row[S_ULP_MAX] = ulp_max > row[S_ULP_MAX] ? ulp_max : row[S_ULP_MAX];
    row[S_ULP_SUM] += ulp_sum;
    row[S_ULP_GT1] += ulp_gt1;
    row[S_SMALL_N] += small_n;
    row[S_SMALL_ERR] += small_err;
    row[S_SMALL_MAX_ABS] = small_max > row[S_SMALL_MAX_ABS] ? small_max : row[S_SMALL_MAX_ABS];
    row[S_REL_LT_1E3] += rel3;
    row[S_REL_LT_5E3] += rel5;
    row[S_MISMATCHES] += mism;
    row[S_SUM_ERR] += sum_err;
    for (i = 0; i < OCTAVES; i++) {
        row[S_OCTAVE_N + i] += cnt[i];
        double *m = &row[S_OCTAVE_MAX_ABS + i];
        *m = mx[i] > *m ? mx[i] : *m;
    }
}

static void pair_block_finite(const double *A, const double *B, int64_t n, const params *P, double *row) {
    pair_block_impl(A, B, n, P, row, 1);
}

static void pair_block_any(const double *A, const double *B, int64_t n, const params *P, double *row) {
    pair_block_impl(A, B, n, P, row, 0);
}

/* 1 when every value of the block is finite. */
static int all_finite(const double *restrict x, int64_t n) {
    int64_t i, bad = 0;
#pragma omp simd reduction(+ : bad)
    for (i = 0; i < n; i++) bad += (x[i] - x[i]) != 0;
    return bad == 0;
}

/* Elements [start, end) of `nt` tensors (kinds[t], base pointers ptrs[t]) reduced for `np` pairs
 * (pairs[2p], pairs[2p+1] index the tensors). out: np rows of N_SLOTS, zeroed here. fparams: rtol, atol,
 * small_threshold, small_atol; iparams: mant, min_eb, octave_base. Returns 0, or -1 on bad arguments. */
int fc_partials(const void *const *ptrs, const int32_t *kinds, int32_t nt, const int32_t *pairs, int32_t np,
                int64_t start, int64_t end, const double *fparams, const int64_t *iparams, double *out) {
    static __thread double bufs[3][BLOCK];
    params P = {fparams[0], fparams[1], fparams[2], fparams[3], iparams[0], iparams[1], iparams[2]};
    const double *blk[3];
    int fin[3];
    int64_t b0, n, t, p;
    if (nt < 1 || nt > 3) return -1;
    memset(out, 0, sizeof(double) * N_SLOTS * np);
    for (b0 = start; b0 < end; b0 += BLOCK) {
        n = end - b0 < BLOCK ? end - b0 : BLOCK;
        for (t = 0; t < nt; t++) {
            blk[t] = load(kinds[t], ptrs[t], b0, n, bufs[t]);
            fin[t] = all_finite(blk[t], n);
        }
        for (p = 0; p < np; p++) {
            int32_t ia = pairs[2 * p], ib = pairs[2 * p + 1];
            double *row = out + N_SLOTS * p;
            (fin[ia] && fin[ib] ? pair_block_finite : pair_block_any)(blk[ia], blk[ib], n, &P, row);
            if (kinds[ia] == kinds[ib]) row[S_BITS_EQUAL] += bits_equal(kinds[ia], ptrs[ia], ptrs[ib], b0, n);
        }
    }
    return 0;
}

/* Largest |x| over the finite elements [start, end) of one tensor (scale.finite_abs_max); 0 when none. */
double fc_finite_abs_max(const void *ptr, int32_t kind, int64_t start, int64_t end) {
    static __thread double buf[BLOCK];
    double best = 0;
    int64_t b0, n, i;
    for (b0 = start; b0 < end; b0 += BLOCK) {
        n = end - b0 < BLOCK ? end - b0 : BLOCK;
        const double *x = load(kind, ptr, b0, n, buf);
        double m = 0;
#pragma omp simd reduction(max : m)
        for (i = 0; i < n; i++) {
            double v = __builtin_fabs(x[i]);
            v = (x[i] - x[i]) == 0 ? v : 0.0;
            m = v > m ? v : m;
        }
        best = m > best ? m : best;
    }
    return best;
}
