"""How fast can any one-pass comparison of three pairs be on this GPU? Floor kernels, next to the real one.

Issue 12 asks for every metric of three pairs (bf16 result and eager, fp64 golden) at >= 1 TB/s over the three
tensors' bytes (<= 3.5 ms at 2.7e8 elements on the H200). The real kernel (`triton_core`) is bound by its
instruction issue, not by memory. These kernels strip it down level by level, each a plain grid-strided
loop with per-lane accumulators like the real one, so that the time of each level is a lower bound for any
kernel that computes at least that much in fp64:

  read     load the three tensors, one fp32 sum (the memory floor)
  sums     + the fp64 differences of the three pairs, the relative error through one reciprocal per expected
           side, the ULP error, and the fp64 sums (squared error, relative, squared relative, dot, squares,
           ULP): the arithmetic no metric set of this kind avoids
  counts   + the fifteen threshold counts (ULP > 1, relative >= 1e-3 and >= 5e-3, beyond tolerance, small
           value errors) and the twelve maxima, per lane
  octaves  + one per-octave histogram of |golden| (shared by the two golden pairs)
  and two optimistic variants: the sums with a cheap reciprocal (rcp.approx and two Newton steps), and the
  octaves level with that reciprocal and every count and maximum decided on fp32 copies

Not a metric implementation (no NaN/Inf handling, no exact division): timing only.

    python benchmarks/compare_floor.py [--n 2.7e8] [--repeat 5] [--out floor.md]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.triton_core import cuda_or_exit, timed  # noqa: E402

LEVELS = {"read": 0, "sums": 1, "counts": 2, "octaves": 3, "sums, cheap reciprocal": 4,
          "octaves, cheap reciprocal, fp32 decisions": 5}


def _kernel():
    import triton
    import triton.language as tl
    _rcp = _rcp_fn()

    @triton.jit
    def floor_kernel(x0, x1, x2, n, tiles_per_prog, out, LEVEL: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        lanes = tl.arange(0, BLOCK)
        zf = tl.zeros([BLOCK], tl.float64)
        zi = tl.zeros([BLOCK], tl.int32)
        s32 = tl.zeros([BLOCK], tl.float32)
        # sums: 3 pairs x (sq, rel, sq_rel, dot, ulp) + 3 tensors' squares
        a0, a1, a2, a3, a4 = zf, zf, zf, zf, zf
        b0, b1, b2, b3, b4 = zf, zf, zf, zf, zf
        e0, e1, e2, e3, e4 = zf, zf, zf, zf, zf
        q0, q1, q2 = zf, zf, zf
        c0, c1, c2, c3, c4 = zi, zi, zi, zi, zi
        m0, m1, m2, m3, m4, m5 = zf, zf, zf, zf, zf, zf
        hist = tl.zeros([64], tl.int32)
        for t in range(0, tiles_per_prog):
            offs = (pid + t * nprog).to(tl.int64) * BLOCK + lanes
            valid = offs < n
            v0 = tl.load(x0 + offs, mask=valid, other=0.0)
            v1 = tl.load(x1 + offs, mask=valid, other=0.0)
            v2 = tl.load(x2 + offs, mask=valid, other=0.0)
            if LEVEL == 0:
                s32 += v0.to(tl.float32) + v1.to(tl.float32) + v2.to(tl.float32)
            else:
                r, e, g = v0.to(tl.float64), v1.to(tl.float64), v2
                ge, ee = tl.abs(g), tl.abs(e)
                if LEVEL >= 4:  # rcp.approx (MUFU) and two Newton steps instead of a correctly rounded division
                    rg = _rcp(ge + 2.220446049250313e-16)
                    re = _rcp(ee + 2.220446049250313e-16)
                else:
                    rg = 1.0 / (ge + 2.220446049250313e-16)
                    re = 1.0 / (ee + 2.220446049250313e-16)
                lg = (ge.to(tl.int64, bitcast=True) >> 52).to(tl.int32) - 1023
                le = (ee.to(tl.int64, bitcast=True) >> 52).to(tl.int32) - 1023
                sg = ((tl.maximum(7 - tl.maximum(lg, -126), -1022) + 1023).to(tl.int64) << 52).to(tl.float64,
                                                                                              bitcast=True)
                se = ((tl.maximum(7 - tl.maximum(le, -126), -1022) + 1023).to(tl.int64) << 52).to(tl.float64,
                                                                                              bitcast=True)
                d0 = tl.abs(r - e)
                d1 = tl.abs(r - g)
                d2 = tl.abs(e - g)
                r0, r1, r2 = d0 * re, d1 * rg, d2 * rg
                u0, u1, u2 = d0 * se, d1 * sg, d2 * sg
                a0, a1, a2, a3, a4 = a0 + d0 * d0, a1 + r0, a2 + r0 * r0, a3 + r * e, a4 + u0
                b0, b1, b2, b3, b4 = b0 + d1 * d1, b1 + r1, b2 + r1 * r1, b3 + r * g, b4 + u1
                e0, e1, e2, e3, e4 = e0 + d2 * d2, e1 + r2, e2 + r2 * r2, e3 + e * g, e4 + u2
                q0, q1, q2 = q0 + r * r, q1 + e * e, q2 + g * g
                if LEVEL == 5:  # decisions on fp32 copies (what a guard-banded fp32 test would cost at least)
                    g32 = v2.to(tl.float32)
                    r32, e32 = v0.to(tl.float32), v1.to(tl.float32)
                    ge32, ee32 = tl.abs(g32), tl.abs(e32)
                    f0 = tl.abs(r32 - e32)
                    f1 = tl.abs(r32 - g32)
                    f2 = tl.abs(e32 - g32)
                    w0, w1, w2 = f0 * re.to(tl.float32), f1 * rg.to(tl.float32), f2 * rg.to(tl.float32)
                    tg32 = 1e-5 + 1e-5 * ge32
                    te32 = 1e-5 + 1e-5 * ee32
                    smg = ge32 < 1e-6
                    sme = ee32 < 1e-6
                    k0, k1, k2 = f0 * 128.0, f1 * 128.0, f2 * 128.0
                    c0 += (k0 > 1).to(tl.int32) + ((w0 >= 1e-3).to(tl.int32) << 8) + (
                        (w0 >= 5e-3).to(tl.int32) << 16) + ((f0 > te32).to(tl.int32) << 24)
                    c1 += (k1 > 1).to(tl.int32) + ((w1 >= 1e-3).to(tl.int32) << 8) + (
                        (w1 >= 5e-3).to(tl.int32) << 16) + ((f1 > tg32).to(tl.int32) << 24)
                    c2 += (k2 > 1).to(tl.int32) + ((w2 >= 1e-3).to(tl.int32) << 8) + (
                        (w2 >= 5e-3).to(tl.int32) << 16) + ((f2 > tg32).to(tl.int32) << 24)
                    c3 += (sme & (f0 > 1e-7)).to(tl.int32) + ((smg & (f1 > 1e-7)).to(tl.int32) << 8) + (
                        (smg & (f2 > 1e-7)).to(tl.int32) << 16)
                    c4 += sme.to(tl.int32) + (smg.to(tl.int32) << 8) + ((v0.to(tl.int16, bitcast=True) == v1.to(
                        tl.int16, bitcast=True)).to(tl.int32) << 16)
                    n0 = tl.maximum(tl.maximum(f0, k0), tl.where(sme, f0, tl.where(sme, 0.0, w0)))
                    n1 = tl.maximum(tl.maximum(f1, k1), tl.where(smg, f1, tl.where(smg, 0.0, w1)))
                    n2 = tl.maximum(tl.maximum(f2, k2), tl.where(smg, f2, tl.where(smg, 0.0, w2)))
                    m0 = tl.where(n0.to(tl.float64) > m0, n0.to(tl.float64), m0)
                    m1 = tl.where(n1.to(tl.float64) > m1, n1.to(tl.float64), m1)
                    m2 = tl.where(n2.to(tl.float64) > m2, n2.to(tl.float64), m2)
                    octave = tl.minimum(tl.maximum(lg + 20, 0), 39)
                    hist += tl.histogram(octave, 64, mask=~smg & valid)
                if LEVEL >= 2 and LEVEL <= 3:
                    tg = 1e-5 + 1e-5 * ge
                    te = 1e-5 + 1e-5 * ee
                    smg = ge < 1e-6
                    sme = ee < 1e-6
                    c0 += (u0 > 1).to(tl.int32) + ((r0 >= 1e-3).to(tl.int32) << 8) + (
                        (r0 >= 5e-3).to(tl.int32) << 16) + ((d0 > te).to(tl.int32) << 24)
                    c1 += (u1 > 1).to(tl.int32) + ((r1 >= 1e-3).to(tl.int32) << 8) + (
                        (r1 >= 5e-3).to(tl.int32) << 16) + ((d1 > tg).to(tl.int32) << 24)
                    c2 += (u2 > 1).to(tl.int32) + ((r2 >= 1e-3).to(tl.int32) << 8) + (
                        (r2 >= 5e-3).to(tl.int32) << 16) + ((d2 > tg).to(tl.int32) << 24)
                    c3 += (sme & (d0 > 1e-7)).to(tl.int32) + ((smg & (d1 > 1e-7)).to(tl.int32) << 8) + (
                        (smg & (d2 > 1e-7)).to(tl.int32) << 16)
                    c4 += sme.to(tl.int32) + (smg.to(tl.int32) << 8) + ((v0.to(tl.int16, bitcast=True) == v1.to(
                        tl.int16, bitcast=True)).to(tl.int32) << 16)
                    m0 = tl.where(d0 > m0, d0, m0)
                    m1 = tl.where(d1 > m1, d1, m1)
                    m2 = tl.where(d2 > m2, d2, m2)
                    rb0 = tl.where(sme, 0.0, r0)
                    rb1 = tl.where(smg, 0.0, r1)
                    rb2 = tl.where(smg, 0.0, r2)
                    m3 = tl.where(rb0 > m3, rb0, m3)
                    m4 = tl.where(rb1 > m4, rb1, m4)
                    m5 = tl.where(rb2 > m5, rb2, m5)
                    m0 = tl.where(u0 > m0, u0, m0)
                    m1 = tl.where(u1 > m1, u1, m1)
                    m2 = tl.where(u2 > m2, u2, m2)
                    m3 = tl.where(sme & (d0 > m3), d0, m3)
                    m4 = tl.where(smg & (d1 > m4), d1, m4)
                    m5 = tl.where(smg & (d2 > m5), d2, m5)
                if LEVEL == 3:
                    octave = tl.minimum(tl.maximum(lg + 20, 0), 39)
                    hist += tl.histogram(octave, 64, mask=~smg & valid)
        tot = (tl.sum(a0 + a1 + a2 + a3 + a4, axis=0) + tl.sum(b0 + b1 + b2 + b3 + b4, axis=0)
               + tl.sum(e0 + e1 + e2 + e3 + e4, axis=0) + tl.sum(q0 + q1 + q2, axis=0)
               + tl.sum(s32, axis=0).to(tl.float64)
               + tl.max(m0 + m1 + m2 + m3 + m4 + m5, axis=0)
               + tl.sum(c0 + c1 + c2 + c3 + c4, axis=0).to(tl.float64) + tl.sum(hist, axis=0).to(tl.float64))
        tl.store(out + pid, tot)

    return floor_kernel


def _rcp_fn():
    import triton
    import triton.language as tl

    @triton.jit
    def rcp(x):
        r = tl.inline_asm_elementwise("rcp.approx.ftz.f64 $0, $1;", "=d,d", [x], dtype=tl.float64, is_pure=True,
                                      pack=1)
        r = tl.fma(r, tl.fma(-x, r, 1.0), r)
        return tl.fma(r, tl.fma(-x, r, 1.0), r)
    return rcp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=float, default=2.7e8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--shapes", default="32,1,8;128,4,2;256,8,1")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dev = cuda_or_exit("benchmarks/compare_floor.py")
    n = int(args.n)
    g = torch.randn(n, dtype=torch.float64, device=dev)
    e = (g * (1 + 1e-3 * torch.randn_like(g))).to(torch.bfloat16)
    r = (g * (1 + 1e-3 * torch.randn_like(g))).to(torch.bfloat16)
    nbytes = g.numel() * (8 + 2 + 2)
    kern = _kernel()
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    rows = [f"device {torch.cuda.get_device_name()}, {n:,} elements (bf16, bf16, fp64), median of {args.repeat}", "",
            "| kernel | shape (BLOCK, warps, programs/SM) | time | effective read bandwidth |", "|---|---|---|---|"]

    def row(name, shape, sec):
        rows.append(f"| {name} | {shape} | {sec * 1e3:.2f} ms | {nbytes / sec / 1e9:.0f} GB/s |")
        print(rows[-1], flush=True)

    for shape in args.shapes.split(";"):
        block, warps, per_sm = (int(v) for v in shape.split(","))
        tiles = -(-n // block)
        progs = min(tiles, sms * per_sm)
        out = torch.empty(progs, dtype=torch.float64, device=dev)
        for name, level in LEVELS.items():
            def go(level=level):
                kern[(progs,)](r, e, g, n, -(-tiles // progs), out, level, block, num_warps=warps)
            row(name, shape, timed(go, args.repeat))
    # the real kernel alone and the whole compare(), same data
    from fusecheck.compare import _structural_check, compare
    from fusecheck.compare.cores import triton_core

    def compare_checks(a, b, c):
        return _structural_check("x", a, b, c)
    row("compare() (scale pass, checks, kernel)", "default", timed(lambda: compare(r, e, g), args.repeat))
    row("  of which: the abs-max scale pass", "default", timed(lambda: triton_core.finite_abs_max([e, g]), args.repeat))
    row("  of which: the structural checks", "-", timed(lambda: compare_checks(r, e, g), args.repeat))
    row("torch.testing.assert_close (1 pair)", "-", timed(
        lambda: torch.testing.assert_close(r, e, rtol=1.0, atol=1.0), args.repeat))
    if args.out:
        Path(args.out).write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
