"""Dynamo backends with planted numerics bugs: the checker must fail each of them.

They run the captured FX graph through an Interpreter that changes one kind of op, the way a broken
fusion compiler would. Usable from the CLI too: `--backend tests/planted/backends.py:bf16_matmul`.
"""
import operator
import time

import torch
import torch.nn.functional as F
from torch.fx import Interpreter


def _lossy_bf16(fn):
    def wrapped(*args, **kwargs):
        out_dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor))
        cast = [a.to(torch.bfloat16) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        return fn(*cast, **kwargs).to(out_dtype)
    return wrapped


def _bf16_accumulated_sum(x, dim=None, keepdim=False, *, dtype=None, block: int = 4):
    """Sum along `dim` adding `block` elements at a time with the running sum rounded to bf16."""
    dims = [dim] if isinstance(dim, int) else list(dim or range(x.dim()))
    out = x
    for d in sorted((d % x.dim() for d in dims), reverse=True):
        acc = torch.zeros_like(out.select(d, 0), dtype=torch.bfloat16)
        for start in range(0, out.shape[d], block):
            acc = (acc.float() + out.narrow(d, start, min(block, out.shape[d] - start)).float().sum(d)).to(torch.bfloat16)
        out = acc.to(x.dtype if dtype is None else dtype)
        if keepdim:
            out = out.unsqueeze(d)
    return out


def _bf16_accumulated_mean(x, dim=None, keepdim=False, *, dtype=None):
    n = x.numel() if dim is None else 1
    for d in ([dim] if isinstance(dim, int) else list(dim or [])):
        n *= x.shape[d]
    return _bf16_accumulated_sum(x, dim, keepdim, dtype=dtype) / n


class _Rewrite(Interpreter):
    functions: dict = {}
    methods: dict = {}

    def call_function(self, target, args, kwargs):
        return self.functions.get(target, target)(*args, **kwargs)

    def call_method(self, target, args, kwargs):
        if target in self.methods:
            return self.methods[target](*args, **kwargs)
        return super().call_method(target, args, kwargs)


def _backend(rewrite_cls):
    def backend(gm, example_inputs):
        def run(*args):
            return rewrite_cls(gm).run(*args)
        return run
    return backend


class _Bf16Matmul(_Rewrite):
    functions = {F.linear: _lossy_bf16(F.linear), torch.matmul: _lossy_bf16(torch.matmul),
                 operator.matmul: _lossy_bf16(operator.matmul), torch.bmm: _lossy_bf16(torch.bmm),
                 F.conv2d: _lossy_bf16(F.conv2d)}


class _Bf16Accumulation(_Rewrite):
    functions = {torch.sum: _bf16_accumulated_sum, torch.mean: _bf16_accumulated_mean}
    methods = {"sum": _bf16_accumulated_sum, "mean": _bf16_accumulated_mean}


def _two_level_mean(x, dim=None, keepdim=False, *, dtype=None):
    """A correct mean in the input's dtype, summed in another order (blocks of 64, then the block sums), as a
    fused reduction splits it: as accurate as eager's, not bitwise equal."""
    if not isinstance(dim, int) and not (isinstance(dim, (list, tuple)) and len(dim) == 1):
        return torch.mean(x, dim, keepdim=keepdim, dtype=dtype)
    d = (dim if isinstance(dim, int) else dim[0]) % x.dim()
    n = x.shape[d]
    if n % 64:
        return torch.mean(x, d, keepdim=keepdim, dtype=dtype)
    y = x.movedim(d, -1).reshape(*x.shape[:d], *x.shape[d + 1:], n // 64, 64)
    out = y.sum(-1).sum(-1) / n
    return out.unsqueeze(d) if keepdim else out


class _TwoLevelMean(_Rewrite):
    functions = {torch.mean: _two_level_mean}
    methods = {"mean": _two_level_mean}


class _DropUpcast(_Rewrite):
    """Drops `.float()` and `.to(torch.float32)`: the region that eager upcasts stays in low precision."""

    methods = {"float": lambda x: x}

    def call_method(self, target, args, kwargs):
        if target == "to" and (torch.float32 in args[1:] or kwargs.get("dtype") is torch.float32):
            return args[0]
        return super().call_method(target, args, kwargs)


bf16_matmul = _backend(_Bf16Matmul)          # matmuls computed in bf16 inside an fp32 model
bf16_accumulation = _backend(_Bf16Accumulation)  # reductions accumulated in bf16
drop_upcast = _backend(_DropUpcast)           # a dropped fp32 upcast around a reduction
two_level_mean = _backend(_TwoLevelMean)     # benign: means summed in another order, same dtype


def unchanged(gm, example_inputs):
    """Correct: a user backend that runs the captured graph as it is (no decision taps: it is not registered)."""
    return gm


def inject_nan(gm, example_inputs):
    def run(*args):
        out = gm(*args)
        first = out[0] if isinstance(out, (tuple, list)) else out
        first.view(-1)[0] = float("nan")
        return out
    return run


def wrong_dtype(gm, example_inputs):
    return lambda *args: [o.double() for o in gm(*args)]


def wrong_shape(gm, example_inputs):
    return lambda *args: [o.reshape(-1) for o in gm(*args)]


def wrong_device(gm, example_inputs):
    return lambda *args: [o.to("meta") for o in gm(*args)]


def noisy(gm, example_inputs):
    """Nondeterministic: a different tiny perturbation each call (like an unordered atomic reduction)."""
    return lambda *args: [o + torch.randn_like(o) * 1e-3 if o.is_floating_point() else o for o in gm(*args)]


def in_fp64(gm, example_inputs):
    """Correct and more accurate than eager: the graph runs in fp64, its outputs rounded to eager's dtypes once
    (bools and integers made from floats then follow the golden's near-ties, not eager's)."""
    def run(*args):
        dtypes = [o.dtype for o in gm(*args)]
        wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        return [o.to(d) for o, d in zip(gm(*wide), dtypes)]
    return run


def flip_some_bools(gm, example_inputs):
    """Every seventh element of each bool output negated: a wrong mask far beyond any near-tie."""
    return lambda *args: [o ^ (torch.arange(o.numel(), device=o.device).reshape(o.shape) % 7 == 0)
                          if o.dtype == torch.bool else o for o in gm(*args)]


def flip_one_bit(gm, example_inputs):
    """Moves data correctly except one element, one ULP off: the data-movement rule must catch it."""
    def run(*args):
        outs = list(gm(*args))
        o = outs[0].clone()
        flat = o.view(-1)
        flat[3] = torch.nextafter(flat[3], torch.tensor(float("inf"), dtype=o.dtype))
        return [o, *outs[1:]]
    return run


def shift_outputs(gm, example_inputs):
    """Every floating output 0.3 too large: a wrong result on any model."""
    return lambda *args: [o + 0.3 if o.is_floating_point() else o for o in gm(*args)]


def previous_call_outputs(gm, example_inputs):
    """Hands back the previous call's outputs from the second call on (a result cache keyed on nothing, a static
    output buffer read before the new call wrote it): right whenever two calls in a row get the same inputs."""
    prev = [None]

    def run(*args):
        out = gm(*args)
        seq = list(out) if isinstance(out, (tuple, list)) else [out]
        kept = [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in seq]
        before, prev[0] = prev[0], kept
        if before is None:
            return out
        return type(out)(before) if isinstance(out, (tuple, list)) else before[0]
    return run


def first_call_outputs(gm, example_inputs):
    """Hands back the first call's outputs forever (a cache keyed on nothing): right on every call with the
    first inputs, so the golden never sees it wrong."""
    kept = []

    def run(*args):
        out = gm(*args)
        seq = list(out) if isinstance(out, (tuple, list)) else [out]
        if not kept:
            kept.append([o.detach().clone() if isinstance(o, torch.Tensor) else o for o in seq])
            return out
        return type(out)(kept[0]) if isinstance(out, (tuple, list)) else kept[0][0]
    return run


def scale_float_outputs(gm, example_inputs):
    """Every floating output of every graph 1% too large (with the gradients that flow back through them)."""
    def run(*args):
        out = gm(*args)
        if isinstance(out, torch.Tensor):
            return out * 1.01 if out.is_floating_point() else out
        return type(out)(o * 1.01 if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in out)
    return run


def flush_tiny_outputs(gm, example_inputs):
    """Floating outputs below 1e-6 of their tensor's largest magnitude written as 0 (an exp that underflows in a
    fused softmax): every error is below atol, and each flushed element has lost all its digits."""
    def flush(o):
        if not isinstance(o, torch.Tensor) or not o.is_floating_point():
            return o
        return torch.where(o.abs() < 1e-6 * o.abs().amax(), torch.zeros_like(o), o)

    def run(*args):
        out = gm(*args)
        return flush(out) if isinstance(out, torch.Tensor) else type(out)(flush(o) for o in out)
    return run


def drop_mutations(gm, example_inputs):
    """Runs the graph on copies of its inputs: outputs are right, in-place updates are lost."""
    return lambda *args: gm(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])


def hang(gm, example_inputs):
    """A compiled region that never returns (a deadlocked kernel): the command must still end. With
    FUSECHECK_TEST_HANG_MARKER set, it writes that file when the hang starts (tests wait for the phase, not
    for a clock)."""
    import os

    def run(*args):
        marker = os.environ.get("FUSECHECK_TEST_HANG_MARKER")
        if marker:
            with open(marker, "w") as f:
                f.write(f"{time.monotonic()}\n")
        while True:
            time.sleep(1)
    return run


def hang_swallowing_interrupts(gm, example_inputs):
    """`hang`, in code that catches every KeyboardInterrupt (a library's `except BaseException`): Ctrl-C alone
    never reaches the command line."""
    hung = hang(gm, example_inputs)

    def run(*args):
        while True:
            try:
                hung(*args)
            except KeyboardInterrupt:
                pass
    return run


def detach_outputs(gm, example_inputs):
    """Right values, but the outputs are cut from autograd: no gradient can flow back."""
    return lambda *args: [o.detach() for o in gm(*args)]


def _wrong_on_call(n: int, onwards: bool = False):
    """A race that fires on exactly the n-th call of each compiled graph (`onwards`: on every call from the
    n-th): 20% error on every fourth element of its floating outputs; every other call is the graph's own
    result."""
    def backend(gm, example_inputs):
        calls = [0]

        def run(*args):
            calls[0] += 1
            outs = list(gm(*args))
            if calls[0] != n and not (onwards and calls[0] > n):
                return outs
            bad = []
            for o in outs:
                if isinstance(o, torch.Tensor) and o.is_floating_point():
                    hit = (torch.arange(o.numel(), device=o.device) % 4 == 0).reshape(o.shape)
                    o = torch.where(hit, o * 1.2, o)
                bad.append(o)
            return bad
        return run
    return backend


first_call_race = _wrong_on_call(1)
second_call_race = _wrong_on_call(2)
third_call_race = _wrong_on_call(3)   # the call on other inputs (the inputs rolled by one)
fourth_call_race = _wrong_on_call(4)  # the first inputs again, after that call
wrong_after_warmup = _wrong_on_call(5, onwards=True)  # right on four calls, wrong from the fifth on


def baked_first_mask(gm, example_inputs):
    """Keeps the integer/bool inputs (masks, ids) of its first call as constants: a stale mask baked into a
    capture. Right on the first inputs, wrong wherever the mask changes (found by a red team, 2026-12-05)."""
    baked = {}

    def run(*args):
        args = list(args)
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and not (a.is_floating_point() or a.is_complex()):
                args[i] = baked.setdefault(i, a.clone())
        return gm(*args)
    return run


def ulp_jitter(gm, example_inputs):
    """Nondeterministic but harmless: every other call moves one element by one ULP (like atomic adds
    landing in another order). Both runs are as accurate as eager."""
    calls = [0]

    def run(*args):
        calls[0] += 1
        outs = list(gm(*args))
        if calls[0] % 2 == 0:
            o = outs[0].clone()
            o.view(-1)[0] = torch.nextafter(o.view(-1)[0], torch.tensor(float("inf"), dtype=o.dtype))
            outs[0] = o
        return outs
    return run


def flip_smallest(gm, example_inputs):
    """The sign of the 6 smallest-magnitude elements of the first output flipped: a few elements wrong where
    eager is accurate, which only the per-element checks see (the RMSE hardly moves)."""
    def run(*args):
        outs = list(gm(*args))
        o = outs[0].clone()
        flat = o.view(-1)
        idx = flat.abs().argsort()[:6]
        flat[idx] = -flat[idx]
        return [o, *outs[1:]]
    return run


def _raises_on_call(n: int):
    """A compiled artifact that crashes on its n-th call (a launch failure, an illegal address on one call)."""
    def backend(gm, example_inputs):
        calls = [0]

        def run(*args):
            calls[0] += 1
            if calls[0] == n:
                raise RuntimeError(f"planted: kernel launch failed on call {n}")
            return gm(*args)
        return run
    return backend


raises_on_call_2 = _raises_on_call(2)
raises_on_call_3 = _raises_on_call(3)  # the call on other inputs (the inputs rolled by one)
raises_on_call_4 = _raises_on_call(4)
raises_on_call_5 = _raises_on_call(5)


def norm_eps_too_large(gm, example_inputs):
    """Every layer norm with epsilon 1e-2 instead of the model's (a constant mistyped in a fused norm kernel): a
    systematic shrink of ~0.5% at unit variance, which the RMSE ratio weighs no more than noise."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.nn.functional.layer_norm:
            args = list(node.args) + [None] * (5 - len(node.args))
            args[4] = 1e-2
            node.args, node.kwargs = tuple(args), {k: v for k, v in node.kwargs.items() if k != "eps"}
    gm.recompile()
    return gm.forward


def norm_output_offset(gm, example_inputs):
    """Every layer norm's output shifted by 2e-3 (a fused norm kernel that adds a bias term twice, or a zero point
    off by a quarter of a bf16 step): about eager's own bf16 error, no slope on the golden, so neither the RMSE
    ratio nor the scale sees it; every element moves the same way."""
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is torch.nn.functional.layer_norm:
            with gm.graph.inserting_after(node):
                shifted = gm.graph.call_function(torch.add, (node, 2e-3))
            node.replace_all_uses_with(shifted, delete_user_cb=lambda user: user is not shifted)
    gm.recompile()
    return gm.forward


class _GradOffset(torch.autograd.Function):
    """Identity forward; the backward adds 1% of the gradient's mean magnitude to every element."""

    @staticmethod
    def forward(ctx, w):
        return w.view_as(w)

    @staticmethod
    def backward(ctx, grad):
        return grad + 0.01 * grad.abs().mean()


def _grad_offset(w):
    return _GradOffset.apply(w)


def _through_first(gm, target, arg: int, fn):
    """The first call of `target` in the graph reads its argument `arg` through `fn` (a backward-only plant)."""
    node = next(n for n in gm.graph.nodes if n.op == "call_function" and n.target is target)
    with gm.graph.inserting_before(node):
        wrapped = gm.graph.call_function(fn, (node.args[arg],))
    node.args = (*node.args[:arg], wrapped, *node.args[arg + 1:])
    gm.recompile()
    return gm.forward


def weight_grad_offset(gm, example_inputs):
    """The first linear layer's weight gradient shifted by 1% of its mean magnitude on every element (a fused
    backward whose accumulator starts from a stale value): under the RMSE ratio, no slope on the golden."""
    return _through_first(gm, torch._C._nn.linear, 1, _grad_offset)


def _times_at(grad, rank: float, factor: float):
    """The gradient with one element (the one at `rank` of the magnitudes' order, 0 to 1) times `factor`."""
    grad = grad.clone()
    flat = grad.view(-1)
    i = int(flat.float().abs().argsort()[round(rank * (flat.numel() - 1))])
    flat[i] = flat[i] * factor
    return grad


class _ElementOff(torch.autograd.Function):
    """Identity forward; the backward makes one element of the gradient (the one at `rank` of the magnitudes'
    order) `factor` times its value."""

    @staticmethod
    def forward(ctx, x, rank, factor):
        ctx.rank, ctx.factor = rank, factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _times_at(grad, ctx.rank, ctx.factor), None, None


def _one_element_off(x):
    return _ElementOff.apply(x, 0.5, 1.2)  # the median-magnitude element 20% large


def _largest_off(x):
    return _ElementOff.apply(x, 1.0, 1.3)  # the largest element 30% large


def largest_weight_grad_element_off(gm, example_inputs):
    """The first linear's weight gradient with its largest element 30% large (a tile's epilogue written twice):
    alone in its octave of |golden|, where the per-octave MaxRel allows ~6e4x chance (a red team's false PASS)."""
    return _through_first(gm, torch._C._nn.linear, 1, _largest_off)


def norm_input_grad_element_off(gm, example_inputs):
    """One element of the gradient into the first layer norm 20% off (a fused norm backward that reads one stale
    partial sum): a lone element where eager's own noise is ~1-2%, the hardest case for a per-element band."""
    return _through_first(gm, torch.nn.functional.layer_norm, 0, _one_element_off)
