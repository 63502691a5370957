"""The reference a magnitude probe is judged against: the unfused chain computed wide, and its own noise.

Why. At huge magnitudes the policy's atol vanishes against the values and only the error ratio decides, so
a correct kernel that reassociates a reduction (a split K, another chunk count) is charged for a rounding
order every correct implementation is free to choose (issue 20: 9 of 13 correct distributed kernels failed
this way). The limit is therefore grounded in the reference's own noise at that magnitude: eager's error
against the golden is taken as the per-metric worst of the reference run plainly and `NOISE_RUNS` times under
randomised rounding with reassociated fp32 reductions (`RandomRounding`, the dispatch mode of the noise band:
mm/bmm contraction and sum/mean order permuted, last bits rounded at random), and with its reductions split
into chunks (`ChunkedReductions`: the K of every mm summed as `CHUNKS` partials), so a kernel is held to what
the unfused composition with a kernel's split would give. The chain is computed in fp32 (or wider) and
rounded once to the op dtype: plain fp16/bf16 eager ops overflow or underflow at these magnitudes exactly
as a broken kernel would.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fusecheck.compare import Metrics, compare
from fusecheck.compare.noise_band import RandomRounding
from fusecheck.op.calls import call, cast
from fusecheck.policy import Policy
from fusecheck.rows import _worst as worst_metrics

NOISE_RUNS = 4
CHUNKS = (2, 3, 8)  # split counts of the chunked runs: halves, a count that divides little, a fine split

aten = torch.ops.aten


def _chunked_mm(chunks: int, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with the contraction split into `chunks` partial products added in order, in a's dtype."""
    k = a.shape[-1]
    bounds = [round(i * k / chunks) for i in range(chunks + 1)]
    out = None
    for lo, hi in zip(bounds, bounds[1:]):
        if hi > lo:
            part = torch.matmul(a[..., lo:hi], b[..., lo:hi, :])
            out = part if out is None else out + part
    return out if out is not None else torch.matmul(a, b)


class ChunkedReductions(TorchDispatchMode):
    """mm/addmm/bmm computed as `chunks` partial products over K added in sequence: the reassociation a
    split-K or chunked kernel makes. Other ops run unchanged."""

    def __init__(self, chunks: int):
        super().__init__()
        self.chunks = chunks

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = getattr(func, "overloadpacket", None)
        with torch.utils._python_dispatch._disable_current_modes():
            if packet in (aten.mm, aten.bmm) and not kwargs:
                return _chunked_mm(self.chunks, args[0], args[1])
            if packet is aten.addmm and len(args) == 3:
                beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
                return beta * args[0] + alpha * _chunked_mm(self.chunks, args[1], args[2])
            return func(*args, **kwargs)


def wide_reference(spec, inputs: dict, dtype: torch.dtype, mode=None) -> dict:
    """The reference computed in fp32 (or the op dtype when wider), each floating output rounded once."""
    acc = torch.promote_types(dtype, torch.float32)
    fn = spec.reference
    if mode is not None:
        def fn(**ins):
            with mode:
                return spec.reference(**ins)
    out = call(fn, cast(inputs, acc), who=f"{type(spec).__name__}.reference (wide)", kernel=False)
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in out.items()}


NOISE_NOTE = (f"magnitude probe judged against the reference's own noise at this magnitude (worst of the wide "
              f"reference, {NOISE_RUNS} randomised-rounding runs and {len(CHUNKS)} chunked-reduction runs)")


def reference_noise(spec, inputs: dict, dtype: torch.dtype, golden: dict, policy: Policy, seed: int,
                    plain: dict | None = None) -> dict[str, Metrics]:
    """Per output, the worst error against the golden of the wide reference (`plain`, computed when None)
    and of its noisy runs."""
    plain = wide_reference(spec, inputs, dtype) if plain is None else plain
    runs = [wide_reference(spec, inputs, dtype, RandomRounding(seed * 1_000_003 + k + 1)) for k in range(NOISE_RUNS)]
    runs += [wide_reference(spec, inputs, dtype, ChunkedReductions(c)) for c in CHUNKS]
    worst: dict[str, Metrics] = {}
    for name, e in plain.items():
        g = golden.get(name)
        if not (isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor) and e.is_floating_point()
                and e.shape == g.shape):
            continue
        m = compare(e, e, g, policy=policy, name=name).vs_golden
        for r in runs:
            x = r.get(name)
            if m is not None and isinstance(x, torch.Tensor) and x.shape == e.shape:
                other = compare(x, x, g, policy=policy, name=name).vs_golden
                if other is not None:
                    m = worst_metrics(m, other)
        if m is not None:
            worst[name] = m
    return worst
