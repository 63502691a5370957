"""Magnitude probes where the range depends on the order of a sum: a correct kernel that overflows where one
valid order of the unfused chain does passes; one that overflows where no order does fails; a probe the chain
itself cannot hold judges nothing instead of ending the run in exit 2 (red-team of 2026-12-07)."""
from __future__ import annotations

import torch

from fusecheck.distributed.reference import Composition, _range_of_orders
from fusecheck.distributed.runner import check
from fusecheck.distributed.task import CheckTask
from fusecheck.op import OpSpec, check_op, seeded_randn

aten = torch.ops.aten
SHAPES = [{"n": 16}, {"n": 7}]


class _SquareGemm(OpSpec):
    """x @ w with x and w of one shape, so the huge probe scales both: products reach 4x the largest float."""
    shapes = SHAPES
    dtypes = ("fp32", "bf16")

    def make_inputs(self, shape, dtype, seed):
        n = shape["n"]
        return {"x": seeded_randn((n, n), seed, dtype), "w": seeded_randn((n, n), seed + 1, dtype)}

    def reference(self, x, w):
        return x @ w


class ProductsRounded(_SquareGemm):
    """Correct: each product rounded to the op dtype before the sum (no fused multiply-add), as a kernel
    without contraction computes; a product beyond the range is Inf there and not in eager's GEMM."""

    def fused(self, x, w):
        acc = torch.promote_types(x.dtype, torch.float32)
        return (x.to(acc)[:, :, None] * w.to(acc)[None, :, :]).sum(1).to(x.dtype)


class SmallRange(ProductsRounded):
    """Broken: an accumulator whose range ends at 1e30, so it overflows where no order of the sum does."""

    def fused(self, x, w):
        out = super().fused(x, w)
        return torch.where(out.abs() > 1e30, torch.full_like(out, float("inf")), out)


class _ColumnSumOfProducts(OpSpec):
    """(x * y).sum(0) of +-1 entries: under the huge probe every even-row product is 4x the largest float, so the
    chain in the op dtype has no finite value at all while the fp64 golden has."""
    shapes = [{"m": 6, "n": 5}]
    dtypes = ("fp32",)

    def make_inputs(self, shape, dtype, seed):
        return {"x": seeded_randn((shape["m"], shape["n"]), seed, dtype).sign(),
                "y": seeded_randn((shape["m"], shape["n"]), seed + 1, dtype).sign()}

    def reference(self, x, y):
        return (x * y).sum(0)


class BeyondRangeCorrect(_ColumnSumOfProducts):
    def fused(self, x, y):
        return (y * x).flip(0).sum(0)


class BeyondRangeBroken(_ColumnSumOfProducts):
    def fused(self, x, y):
        return (x * y).sum(0) * 1.01


def _probe_rows(report, probe="magnitude:huge"):
    return [r for r in report.probe_rows if probe in r.name]


def test_the_range_of_orders_marks_exactly_the_sums_one_order_takes_beyond_the_range():
    big = 1.5e19                     # one product 2.25e38 fits fp32; two of one sign (4.5e38) do not
    a = torch.tensor([[big, big, -big], [1.0, 2.0, 3.0]])
    b = torch.tensor([[big, 1.0], [big, 1.0], [big, 1.0]])
    out = _range_of_orders(aten.mm.default, (a, b), {}, a @ b)
    assert out[0, 0] == float("inf")                  # 2 positive terms first: beyond the range
    assert torch.equal(out[1], (a @ b)[1]) and torch.isfinite(out[0, 1])   # within range in any order
    x = torch.tensor([[big, -3e38], [1.0, 2.0]])
    s = _range_of_orders(aten.sum.dim_IntList, (x, [1]), {}, x.sum(1))
    assert torch.isfinite(s).tolist() == [True, True]
    both = torch.tensor([[3e38, 3e38, -3e38, -3e38]])
    assert torch.isnan(_range_of_orders(aten.sum.dim_IntList, (both, [1]), {}, both.sum(1))).all()


def test_the_range_run_changes_nothing_at_ordinary_magnitudes():
    x, w = torch.randn(9, 9), torch.randn(9, 9)
    with Composition(sequential=False, range_of_orders=True):
        y = torch.nn.functional.linear(x, w, w[0]) + (x * w).sum(1, keepdim=True)
    assert torch.equal(y, torch.nn.functional.linear(x, w, w[0]) + (x * w).sum(1, keepdim=True))


def test_a_kernel_whose_overflow_one_order_of_the_chain_shares_passes_the_huge_probe():
    report = check_op(ProductsRounded(), repeat=1)
    huge = _probe_rows(report)
    assert report.passed, [(r.name, r.verdict.message) for r in report.all_rows if not r.passed]
    assert any("set aside" in n for r in huge for n in r.notes), [r.notes for r in huge]


def test_a_kernel_that_overflows_where_no_order_does_still_fails():
    report = check_op(SmallRange(), repeat=1)
    failed = [r for r in report.all_rows if not r.passed]
    assert report.exit_code == 1 and failed
    assert {r.verdict.code for r in _probe_rows(report) if not r.passed} == {"nan_inf_mismatch"}


def test_a_probe_the_chain_cannot_hold_judges_nothing_and_a_real_bug_still_exits_1():
    good = check_op(BeyondRangeCorrect(), repeat=1)
    beyond = [r for r in _probe_rows(good) if r.verdict.code == "beyond_range"]
    assert good.exit_code == 0 and beyond, [(r.name, r.verdict.code) for r in good.all_rows]
    assert "not judged" in beyond[0].verdict.message
    bad = check_op(BeyondRangeBroken(), repeat=1)
    assert bad.exit_code == 1, [(r.name, r.verdict.code) for r in bad.all_rows if not r.passed]


def test_the_repository_all_gather_gemm_passes_layer_2_on_a_square_shape():
    """delivered and b share a shape here, so the huge probe scales both (it failed before: 12 positions)."""
    rep = check(CheckTask("kernels/ag_gemm.py:AllGatherGemm", shapes=[{"m": 8, "k": 16, "n": 16}],
                          layers=("compute",)), 2)
    assert rep.status == "PASS", [(r.get("variant"), r.get("message")) for r in rep.to_dict().get("results", [])
                                  if r.get("status") != "PASS"][:3]
