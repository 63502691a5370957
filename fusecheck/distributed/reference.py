"""The reference a fused kernel is held to in layers 2 and 3: the unfused composition, and the noise of its own
reassociation, measured from the computation.

Why. `compare` asks "not worse than eager against the golden", and eager is one summation order. A correct
kernel that tiles, chunks or splits a reduction sums in another, and its rounding error can be several times
eager's with no bug. Measured on CPU (MKL, fp32, K = 2048): a GEMM computed one row tile at a time (what a
chunked kernel does) has 3.2x the RMSE of the single GEMM, because the small-M path accumulates along K in
sequence while the large GEMM blocks K. At ordinary magnitudes atol hides it; at the huge probes, and at
large K, only the error ratio decides, and correct kernels failed (issue 20: 9 of 13). So when the plain
comparison fails on its ratio checks, eager's error against the golden is replaced by the per-metric worst of
eager and the same reference re-run as `Composition`:

  * every matmul (mm, addmm, bmm, baddbmm) and sum/mean done as recursive summation along its reduced index,
    one term at a time, in the accumulation dtype (fp32 for fp16/bf16/fp32, with a fused multiply-add per
    step): the order of a one-row tile, of split-K partials added as they arrive, of a ring reduction; the
    least accurate of the textbook orders, and bit for bit what MKL's small-M GEMM does. Any split of a
    reduction is a regrouping of this sequence, so a correct kernel is not worse than it by more than chance;
  * for a magnitude probe in fp16/bf16 (whose reference is computed in fp32 so that fp16's range does not
    overflow as a broken kernel would), also every op's output rounded to the op dtype's precision (fp32's
    range kept): the unfused composition as eager computes it, less the overflow the probe is there to catch.

A kernel whose error is worse than all of these, beyond the policy's ratios, fails as before. Ops with an
internal reduction this does not rewrite (softmax, layer_norm, var, norms, convolution) keep eager's order.
Reductions longer than `MAX_STEPS` are summed in `MAX_STEPS` sequential blocks (a bound on the cost of the
Python loop, not a tolerance: blocking only makes the reference more accurate, so the band only narrows).
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fusecheck.compare import Comparison, Metrics, Status, Verdict, compare
from fusecheck.distributed.tiling import chunk_bounds

MAX_STEPS = 4096
_PRECISION_BITS = {torch.float16: 11, torch.bfloat16: 8}   # significand bits, with the hidden one
aten = torch.ops.aten


def _acc(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def _fma_step(acc: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """acc + x * y rounded once to acc's dtype (fp32: the product of two fp32 values is exact in fp64)."""
    if acc.dtype == torch.float32:
        return (acc.double() + x.double() * y.double()).float()
    return acc + x.to(acc.dtype) * y.to(acc.dtype)


def sequential_matmul(a: torch.Tensor, b: torch.Tensor, init: torch.Tensor | None = None,
                      alpha=1) -> torch.Tensor:
    """init + alpha * (a @ b) (batched or not) summed over K one term at a time, in the accumulation dtype."""
    out_dtype = a.dtype
    acc_dtype = _acc(out_dtype)
    shape = (*a.shape[:-1], b.shape[-1])
    acc = torch.zeros(shape, dtype=acc_dtype, device=a.device)
    if init is not None:
        acc = acc + init.to(acc_dtype)
    for k0, k1 in chunk_bounds(a.shape[-1], MAX_STEPS):
        x, y = a[..., k0:k1], b[..., k0:k1, :]
        if k1 - k0 > 1:    # a block (only past MAX_STEPS terms): its own product, then one step
            acc = acc + alpha * (x.to(acc_dtype) @ y.to(acc_dtype))
        else:
            acc = _fma_step(acc, x * alpha if alpha != 1 else x, y)
    return acc.to(out_dtype)


def sequential_sum(x: torch.Tensor, dims=None, keepdim: bool = False, dtype=None, mean: bool = False) -> torch.Tensor:
    """sum/mean of x over `dims` (None or []: all) added one element at a time in the accumulation dtype."""
    out_dtype = dtype or x.dtype
    nd = x.dim()
    dims = list(range(nd)) if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0) else \
        [int(d) % max(nd, 1) for d in ([dims] if isinstance(dims, int) else dims)]
    keep = [d for d in range(nd) if d not in dims]
    moved = x.permute(*keep, *dims) if nd else x
    flat = moved.reshape(*[x.shape[d] for d in keep], -1)
    acc = torch.zeros(flat.shape[:-1], dtype=_acc(out_dtype), device=x.device)
    n = flat.shape[-1]
    for i0, i1 in chunk_bounds(n, MAX_STEPS):
        acc = acc + flat[..., i0:i1].to(acc.dtype).sum(-1)
    if mean:
        acc = acc / n
    out = acc.to(out_dtype)
    if keepdim:
        out = out.reshape([1 if d in dims else x.shape[d] for d in range(nd)])
    return out


def round_to_precision(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp32 `t` rounded (to nearest even) to `dtype`'s significand, keeping fp32's exponent range."""
    bits = _PRECISION_BITS.get(dtype)
    if bits is None or t.dtype != torch.float32:
        return t
    drop = 24 - bits
    i = t.view(torch.int32)
    r = (i + ((1 << (drop - 1)) - 1) + ((i >> drop) & 1)) & ~((1 << drop) - 1)
    return torch.where(torch.isfinite(t), r.view(torch.float32), t)


def _reduce_args(args, kwargs):
    x = args[0]
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
    return x, dims, keepdim, kwargs.get("dtype")


def _sequential(func, args, kwargs):
    """The sequential version of a reduction this rewrites, or NotImplemented."""
    packet = getattr(func, "overloadpacket", None)
    floating = [t for t in args if isinstance(t, torch.Tensor)]
    if not floating or not all(t.is_floating_point() for t in floating) or func._opname.endswith("_") \
            or any(t.layout != torch.strided for t in floating):
        return NotImplemented
    if packet in (aten.mm, aten.bmm) and len(args) == 2 and not kwargs:
        return sequential_matmul(args[0], args[1])
    if packet in (aten.addmm, aten.baddbmm) and len(args) == 3:
        init = args[0] * kwargs.get("beta", 1)
        return sequential_matmul(args[1], args[2], init, kwargs.get("alpha", 1))
    if packet in (aten.sum, aten.mean) and set(kwargs) <= {"dtype", "dim", "keepdim"}:
        x, dims, keepdim, dtype = _reduce_args(args, kwargs)
        if func._overloadname == "default":
            dims, keepdim = None, False
        return sequential_sum(x, dims, keepdim, dtype, mean=packet is aten.mean)
    return NotImplemented


def _signed_terms(func, args, kwargs) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(sum of the positive terms, sum of the negative terms' magnitudes) of each output element of a matmul
    or sum that `_sequential` rewrites, in fp64; None for any other op."""
    packet = getattr(func, "overloadpacket", None)
    matmul = packet in (aten.mm, aten.bmm, aten.addmm, aten.baddbmm)
    reduction = packet in (aten.sum, aten.mean) and set(kwargs) <= {"dtype", "dim", "keepdim"}
    if not (matmul or reduction) or not args or not isinstance(args[0], torch.Tensor):
        return None  # before any fp64 copy: the mode sees every op of the chain
    d = [a.double() if isinstance(a, torch.Tensor) else a for a in args]
    if matmul:
        a, b = (d[1], d[2]) if packet in (aten.addmm, aten.baddbmm) else (d[0], d[1])
        a = a * kwargs.get("alpha", 1)
        pos = a.clamp(min=0) @ b.clamp(min=0) + a.clamp(max=0) @ b.clamp(max=0)
        neg = -(a.clamp(min=0) @ b.clamp(max=0) + a.clamp(max=0) @ b.clamp(min=0))
        if packet in (aten.addmm, aten.baddbmm):
            init = d[0] * kwargs.get("beta", 1)
            pos, neg = pos + init.clamp(min=0), neg - init.clamp(max=0)
        return pos, neg
    x, dims, keepdim, _ = _reduce_args(d, kwargs)
    if func._overloadname == "default" or dims is None or (isinstance(dims, (list, tuple)) and not dims):
        dims, keepdim = list(range(x.dim())), False
    return x.clamp(min=0).sum(dims, keepdim=keepdim), -x.clamp(max=0).sum(dims, keepdim=keepdim)


def _range_of_orders(func, args, kwargs, out):
    """`out` with +-Inf (NaN where both signs can) wherever some order of the op's sum leaves its accumulation
    dtype's range: adding all terms of one sign first reaches the largest partial sum, so that happens exactly
    where one sign's terms sum beyond the largest finite value (a single product beyond it included)."""
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        return out
    terms = _signed_terms(func, args, kwargs)
    if terms is None:
        return out
    limit = torch.finfo(_acc(out.dtype)).max
    up, down = (t.reshape(out.shape).to(out.device) > limit for t in terms)
    inf = torch.full((), float("inf"), dtype=out.dtype, device=out.device)
    return torch.where(up & down, inf - inf, torch.where(up, inf, torch.where(down, -inf, out)))


class Composition(TorchDispatchMode):
    """Runs a reference with its matmuls and sums as recursive summation (`sequential`), and/or every op's
    floating fp32 output rounded to `precision`'s significand (fp16/bf16; fp32's range kept); or (`range_of_orders`)
    as eager computes it but with +-Inf where some order of a sum leaves the range (`_range_of_orders`)."""

    def __init__(self, sequential: bool = True, precision: torch.dtype | None = None, range_of_orders: bool = False):
        super().__init__()
        self.sequential, self.precision, self.range_of_orders = sequential, precision, range_of_orders
        self.rewritten = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = _sequential(func, args, kwargs) if self.sequential else NotImplemented
        if out is NotImplemented:
            out = func(*args, **kwargs)
        else:
            self.rewritten += 1
        if self.range_of_orders:
            out = _range_of_orders(func, args, kwargs, out)
        if self.precision is None:
            return out
        returns = func._schema.returns
        flat = out if isinstance(out, (tuple, list)) else (out,)
        rounded = []
        for i, t in enumerate(flat):
            alias = returns[i].alias_info if i < len(returns) else None
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                if alias is not None and alias.is_write:
                    t.copy_(round_to_precision(t, self.precision))
                elif alias is None:
                    t = round_to_precision(t, self.precision)
            rounded.append(t)
        if isinstance(out, tuple):
            return tuple(rounded)
        return rounded if isinstance(out, list) else rounded[0]


# the re-run that says where the range depends on the order; its values there are not noise (rejudge skips it)
RANGE_OF_ORDERS = "an order of each sum that leaves the range where one can"


def compositions(dtype: torch.dtype, probe: bool) -> list[tuple[str, Composition]]:
    """The re-runs of a reference (name, mode): sequential reductions; for a magnitude probe in a low-precision
    dtype, also the op-precision composition (with and without sequential reductions); for any magnitude probe,
    the range of orders."""
    out = [("sequential reductions", lambda: Composition(sequential=True))]
    if probe and dtype in _PRECISION_BITS:
        out = [("sequential reductions at op precision", lambda: Composition(True, dtype)),
               ("op-precision composition", lambda: Composition(False, dtype))]
    if probe:
        out.append((RANGE_OF_ORDERS, lambda: Composition(sequential=False, range_of_orders=True)))
    return [(name, make()) for name, make in out]


def worst(a: Metrics, b: Metrics) -> Metrics:
    """Per-metric worst of two errors against the golden (cosine: the smaller)."""
    keys = set(a.values) | set(b.values)
    pick = {k: (min if k == "cosine" else max) for k in keys}
    return Metrics({k: pick[k](a.values.get(k, b.values.get(k)), b.values.get(k, a.values.get(k))) for k in keys})


def error_against(x, golden, policy, name) -> Metrics | None:
    """x's error against the golden, as `compare` measures it (None when no comparison could be made)."""
    if not (isinstance(x, torch.Tensor) and isinstance(golden, torch.Tensor) and x.shape == golden.shape):
        return None
    return compare(x, x, golden, policy=policy, name=name).reference_vs_golden


# Under a magnitude probe, whether an element overflows can depend on the order of a sum: a product beyond the
# range cancels back into it inside a fused multiply-add or a GEMM's blocking, and overflows in a row-chunked
# one (measured: an fp32 GEMM finite at -3.1e37 where one of its products is 5.1e38, inf once chunked by rows)
OVERFLOW_CODES = frozenset({"nan_inf_mismatch", "no_finite_values"})


def needs_noise(cmp, magnitude: bool = False) -> bool:
    """Only a failure of the ratio checks against the golden can be eager's order being lucky; under a magnitude
    probe, also NaN/Inf where eager is finite (or no finite value at all), which another order may share."""
    code = cmp.verdict.code
    return code == "worse_than_eager" or (magnitude and code in OVERFLOW_CODES)


def rejudge(got, eager, gold, reruns: list[tuple[str, torch.Tensor]], policy, name: str, first, *,
            magnitude: bool = False, **kw):
    """`first` (the plain comparison) judged again with eager's error taken as the per-metric worst of eager
    and the re-runs: PASS when the kernel is not worse than the composition's own noise. Notes say which.
    Under a magnitude probe, NaN/Inf of the kernel that an order of the unfused chain shares are set aside first
    (`_order_dependent_overflow`)."""
    if magnitude and first.verdict.code in OVERFLOW_CODES:
        return _order_dependent_overflow(got, eager, gold, reruns, policy, name, first, **kw)
    base = error_against(eager, gold, policy, name)
    if base is None:
        return first
    used = []
    for label, y in reruns:
        if label == RANGE_OF_ORDERS:
            continue
        m = error_against(y, gold, policy, name)
        if m is not None:
            base, used = worst(base, m), used + [label]
    if not used:
        return first
    cmp = compare(got, eager, gold, policy=policy, name=name, reference_vs_golden=base, **kw)
    cmp.notes.append(f"eager's error taken as the worst of eager and the reference re-run with "
                     f"{', '.join(used)} (the reassociation noise of the unfused composition); against eager "
                     f"alone: {first.verdict.message}")
    return cmp


def _order_dependent_overflow(got, eager, gold, reruns, policy, name: str, first, **kw):
    """The elements where the golden is finite and eager or a re-run of the unfused chain is not (the range
    depends on the order there) are set aside as NaN in every run, and the rest is judged as any row is. The
    kernel fails as before where it overflows and no order of the chain does; where every finite golden
    element is such an element, the probe is beyond the op's range and judges nothing."""
    runs = [eager] + [y for _, y in reruns]
    if not all(isinstance(t, torch.Tensor) and t.is_floating_point() and t.shape == gold.shape
               for t in [got, gold, *runs]):
        return first
    finite = torch.isfinite(gold)
    risky = torch.zeros_like(finite)
    for y in runs:
        risky |= finite & ~torch.isfinite(y.to(gold.device))
    if bool((finite & ~torch.isfinite(got.to(gold.device)) & ~risky).any()) or not bool(risky.any()):
        return first
    k, labels = int(risky.sum()), ", ".join(["eager"] + [label for label, _ in reruns])
    if k == int(finite.sum()):
        return Comparison(name, str(got.dtype).removeprefix("torch."), tuple(got.shape), Verdict(
            Status.PASS, "beyond_range", f"not judged: at all {k} element(s) where the fp64 golden is finite, the "
            f"unfused chain itself overflows in at least one valid order ({labels}): this magnitude is beyond the "
            "op's range"))

    def aside(t):
        return torch.where(risky.to(t.device), torch.full((), float("nan"), dtype=t.dtype, device=t.device), t)
    got, eager, gold = aside(got), aside(eager), aside(gold)
    cmp = compare(got, eager, gold, policy=policy, name=name, **kw)
    if needs_noise(cmp):
        cmp = rejudge(got, eager, gold, [(label, aside(y)) for label, y in reruns], policy, name, cmp, **kw)
    cmp.notes.append(f"{k} element(s) set aside: the fp64 golden is finite there and the unfused chain overflows "
                     f"in at least one valid order ({labels}); the kernel's NaN/Inf all lie among them")
    return cmp
