"""When eager's single order was only luckier: rows re-judged against the unfused composition's own noise.

Why. A correct fused kernel tiles or splits its reductions, and its rounding error can be several times that
of eager's one op with no bug; at the huge-magnitude probes, and at large K, the policy's atol no longer hides
it and only the error ratio decides. So a row that fails the ratio checks is judged again with eager's error
taken as the per-metric worst of eager and the reference re-run as the unfused composition with its
reductions summed in sequence (and, for fp16/bf16 magnitude probes, at op precision): the same
`Composition` modes and `rejudge` as `fusecheck dist`'s layers 2 and 3 (fusecheck/distributed/reference.py),
so the two commands hold a kernel to one reference. The magnitude probes' eager is the chain computed in fp32
and rounded once (`wide_reference`): plain fp16/bf16 ops overflow there exactly as a broken kernel would.
"""
from __future__ import annotations

from typing import Callable

import torch

from fusecheck.compare import Comparison
from fusecheck.distributed.reference import compositions, needs_noise, rejudge
from fusecheck.op.calls import call, cast


def wide_reference(spec, inputs: dict, dtype: torch.dtype, **kw) -> dict:
    """The reference computed in fp32 (or the op dtype when wider), each floating output rounded once."""
    acc = torch.promote_types(dtype, torch.float32)
    out = call(spec.reference, cast(inputs, acc), who=f"{type(spec).__name__}.reference (fp32)", kernel=False, **kw)
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in out.items()}


def settle(rows: list[Comparison], fused: dict, eager: dict, golden: dict, *, rerun: Callable[[object], dict],
           dtype: torch.dtype, magnitude: bool, policy, prefix: str, seen: Callable | None,
           nonfinite_probe: bool) -> list[Comparison]:
    """`rows` with each ratio-check failure re-judged against the composition's noise; `rerun(mode)` runs
    the reference under a dispatch mode and returns its results by name. Nothing runs when no row doubts."""
    doubtful = [i for i, r in enumerate(rows) if needs_noise(r, magnitude)]
    if not doubtful:
        return rows
    view = seen or (lambda t: t)
    reruns = []
    for label, mode in compositions(dtype, magnitude):
        with mode:
            reruns.append((label, rerun(mode)))
    out = list(rows)
    for i in doubtful:
        name = rows[i].name[len(prefix):]
        ys = [(label, view(r[name])) for label, r in reruns if isinstance(r.get(name), torch.Tensor)]
        out[i] = rejudge(view(fused[name]), view(eager[name]), view(golden[name]), ys, policy, rows[i].name,
                         rows[i], magnitude=magnitude, nonfinite_probe=nonfinite_probe)
    return out
