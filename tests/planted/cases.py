"""Small targets for the checker's own tests, including deliberately bad ones."""
import dataclasses

import torch
from torch import nn

from fusecheck.case import Case


class ReturnsNothing(nn.Module):
    def forward(self, x):
        x.sum()


class EmptyOutput(nn.Module):
    def forward(self, x):
        return x[:0] * 2


class AllNaN(nn.Module):
    def forward(self, x):
        return torch.log(-(x.abs() + 1))


class AllInf(nn.Module):
    """exp(1000 x) overflows in eager, compiled and the golden: no finite value anywhere."""
    def forward(self, x):
        return torch.exp(1000 * (x.abs() + 1))


class InfAndNaN(nn.Module):
    def forward(self, x):
        return torch.cat([torch.exp(1000 * (x.abs() + 1)), torch.log(-(x.abs() + 1))])


class InfGradient(nn.Module):
    """A finite output whose parameter gradient is +-Inf everywhere (d sqrt(u) / du at u = 0)."""
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4, 3))

    def forward(self, x):
        return x + torch.sqrt(self.w - self.w.detach())


class BigRMSNorm(nn.Module):
    """RMSNorm whose input is large: the fp32 upcast is what keeps x^2 from overflowing fp16."""

    def forward(self, x):
        x = x * 300
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + 1e-6)).to(x.dtype)


class IntAndFloat(nn.Module):
    def forward(self, x):
        return x.argmax(-1), (x > 0), x.relu() * 2


def returns_nothing():
    return Case(ReturnsNothing(), (torch.randn(4),), "returns_nothing")


def empty_output():
    return Case(EmptyOutput(), (torch.randn(4, 3),), "empty_output")


def all_nan():
    return Case(AllNaN(), (torch.randn(4, 3),), "all_nan")


def all_inf():
    return Case(AllInf(), (torch.randn(4, 3),), "all_inf")


def inf_and_nan():
    return Case(InfAndNaN(), (torch.randn(4, 3),), "inf_and_nan")


def inf_gradient():
    return Case(InfGradient(), (torch.randn(4, 3),), "inf_gradient")


def big_rmsnorm():
    return Case(BigRMSNorm(), (torch.randn(8, 256),), "big_rmsnorm")


def int_and_float():
    return (IntAndFloat(), torch.randn(6, 5))


class SignsOfFeatures(nn.Module):
    """bf16 features and the mask of the positive ones, with their count: the mask and the count follow the
    features' near-ties at 0.5 (bf16 rounds values within its spacing onto 0.5), so eager's bf16 mask differs from the fp64 golden's at a few elements."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(256, 512)

    def forward(self, x):
        z = self.lin(x)
        return z, z > 0.5, (z > 0.5).sum()


def signs_of_features():
    torch.manual_seed(0)
    return (SignsOfFeatures(), torch.randn(64, 256))


class MaxOverLastDim(nn.Module):
    """Its result does not change when the inputs roll along their last dimension."""

    def forward(self, x):
        return x.amax(-1), x.sum(-1)


def max_over_last_dim():
    return (MaxOverLastDim(), torch.randn(8, 33))


class Routed(nn.Module):
    """Each row keeps its two largest features (a top-k selection, as a router's)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 32)

    def forward(self, x):
        h = self.proj(x)
        vals, idx = h.topk(2, dim=-1)
        return torch.zeros_like(h).scatter(-1, idx, vals)


def routed():
    torch.manual_seed(0)
    return (Routed(), torch.randn(16, 32))


class MaskedScores(nn.Module):
    """Attention-like scores with a padding mask given as an input."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x, pad):
        h = self.proj(x)
        scores = (h @ h.transpose(-1, -2)).masked_fill(pad[:, None, :], float("-inf"))
        return scores.softmax(-1) @ h


def masked_scores():
    torch.manual_seed(0)
    pad = torch.zeros(2, 8, dtype=torch.bool)
    pad[0, 5:] = True
    return (MaskedScores(), (torch.randn(2, 8, 16), pad))


def builder_returns_none():
    return None


class MutatesInput(nn.Module):
    def forward(self, x):
        x.add_(1)
        return x.sin()


class MutatesBuffer(nn.Module):
    """A running statistic updated in place, like BatchNorm in training mode."""

    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(5))

    def forward(self, x):
        self.running.mul_(0.9).add_(0.1 * x.mean(0))
        return x * 2


class ReadsThenUpdatesCache(nn.Module):
    """Reads a cache and updates it in place (a KV cache); non-persistent buffers are not in state_dict."""

    def __init__(self, persistent: bool):
        super().__init__()
        self.register_buffer("cache", torch.full((4, 8), 0.5), persistent=persistent)

    def forward(self, x):
        y = x + self.cache
        self.cache.add_(x)
        return y


class WritesKwarg(nn.Module):
    def forward(self, x, *, out):
        out.copy_(x.sin())
        return x * 2


def cache_persistent():
    return Case(ReadsThenUpdatesCache(True), (torch.randn(4, 8),), "cache_persistent")


def cache_non_persistent():
    return Case(ReadsThenUpdatesCache(False), (torch.randn(4, 8),), "cache_non_persistent")


def writes_kwarg():
    return Case(WritesKwarg(), (torch.randn(4, 8),), "writes_kwarg", {"out": torch.zeros(4, 8)})


def mutates_input():
    return Case(MutatesInput(), (torch.randn(8, 5),), "mutates_input")


def mutates_buffer():
    return Case(MutatesBuffer(), (torch.randn(8, 5),), "mutates_buffer")


_CALLS = [0]


class NoisyEager(nn.Module):
    """Not bitwise repeatable even in eager (a stand-in for unordered atomics in an eager kernel; not an
    RNG, which the checker refuses as a target)."""

    def forward(self, x):
        _CALLS[0] += 1
        return x.sin() + (_CALLS[0] % 3) * 1e-6


def noisy_eager():
    return Case(NoisyEager(), (torch.randn(64, 64),), "noisy_eager")


class DrawsNoise(nn.Module):
    def forward(self, x):
        return torch.nn.functional.dropout(x.sin(), 0.1, training=True)


def draws_noise():
    return Case(DrawsNoise(), (torch.randn(8, 8),), "draws_noise")


@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    extra: torch.Tensor


class ReturnsDataclass(nn.Module):
    def forward(self, x):
        return x.sum(), Out(x.sin(), x.cos())


class Holder:
    def __init__(self, t):
        self.t = t


class ReturnsPlainObject(nn.Module):
    def forward(self, x):
        return x.sin(), Holder(x.cos())


class ScalesInputInPlace(nn.Module):
    def forward(self, x):
        x.mul_(3)
        return x.sum(0)


def returns_dataclass():
    return Case(ReturnsDataclass(), (torch.randn(4, 8),), "returns_dataclass")


def returns_plain_object():
    return Case(ReturnsPlainObject(), (torch.randn(4, 8),), "returns_plain_object")


def scales_input_in_place():
    return Case(ScalesInputInPlace(), (torch.randn(4, 8),), "scales_input_in_place")


class ExpandedMask(nn.Module):
    """A non-persistent buffer that is an expanded view (elements share memory): reset by reassignment."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.ones(1, 8).expand(4, 8), persistent=False)

    def forward(self, x):
        return x * self.mask


class GrowingCache(nn.Module):
    """A KV cache grown by reassignment (torch.cat), not in place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(0, 8), persistent=False)

    def forward(self, x):
        self.cache = torch.cat([self.cache, x])
        return self.cache.sum(0)


class ReseedsItself(nn.Module):
    """Calls torch.manual_seed inside: moves the RNG but repeats itself exactly."""

    def forward(self, x):
        torch.manual_seed(123)
        return x + torch.randn_like(x) * 0


class BranchesWithCond(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        return torch.cond(y.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (y,))


class CastsToFp8(nn.Module):
    def forward(self, x):
        return (x * 2).to(torch.float8_e4m3fn)


def expanded_mask():
    return Case(ExpandedMask(), (torch.randn(4, 8),), "expanded_mask")


def growing_cache():
    return Case(GrowingCache(), (torch.randn(2, 8),), "growing_cache")


def reseeds_itself():
    return Case(ReseedsItself(), (torch.randn(4, 8),), "reseeds_itself")


def branches_with_cond():
    return Case(BranchesWithCond(), (torch.randn(4, 8),), "branches_with_cond")


def casts_to_fp8():
    return Case(CastsToFp8(), (torch.randn(4, 8),), "casts_to_fp8")


class NumbersAndKeywords(nn.Module):
    """Returns Python numbers beside a tensor (`.item()`, a count, a flag, a label) and takes a keyword input:
    the numbers are results to judge, the keyword input's gradient too."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, scale=None):
        h = self.lin(x) * scale
        return {"score": h.sum().item(), "count": int(x.shape[0]), "positive": bool(h.sum() > -1e9),
                "label": "logits", "h": h}


def numbers_and_keywords():
    torch.manual_seed(0)
    return Case(NumbersAndKeywords(), (torch.randn(4, 8),), "numbers_and_keywords", {"scale": torch.randn(4, 8)})


class WithEmptyCache(nn.Module):
    """Returns its result beside an empty cache (a zero-length slice), as a decoder with no past does."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x)
        return {"h": h, "past": h[:, :0]}


def with_empty_cache():
    torch.manual_seed(0)
    return Case(WithEmptyCache(), (torch.randn(4, 8),), "with_empty_cache")


class LengthFromInput(nn.Module):
    """Its output's length is read from an input (a batch of packed sequences): rolled inputs give another
    output shape, so the run on them needs upstream gradients of its own."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, lengths):
        return self.lin(x[:int(lengths[0])]).tanh()


def length_from_input():
    torch.manual_seed(0)
    return Case(LengthFromInput(), (torch.randn(6, 8), torch.tensor([5, 3, 2])), "length_from_input")


class AttributeEma(nn.Module):
    """A running statistic held in a plain tensor attribute (not a buffer), updated in place."""

    def __init__(self):
        super().__init__()
        self.ema = torch.zeros(5)

    def forward(self, x):
        self.ema.mul_(0.9).add_(0.1 * x.mean(0))
        return x * 2 + self.ema


class AttributeCache(nn.Module):
    """A cache reassigned to a plain attribute each call (`self.k_cache = k`): read on the next call when it
    exists, created by the first call."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        k = self.proj(x)
        prev = getattr(self, "k_cache", None)
        self.k_cache = k
        return k if prev is None else k + prev


def attribute_ema():
    return Case(AttributeEma(), (torch.randn(8, 5),), "attribute_ema")


def attribute_cache():
    return Case(AttributeCache(), (torch.randn(4, 8),), "attribute_cache")


class UpcastNorm(nn.Module):
    """An RMSNorm written as the transformers ones are: `x.to(torch.float32)` first. In the fp64 golden that
    cast would round every value to fp32 and run the norm with eager's own fp32 ops."""

    def __init__(self, hidden: int = 2048):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(hidden))

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(x.dtype)


def upcast_norm():
    return Case(UpcastNorm(), (3 + torch.randn(16, 2048),), "upcast_norm")


class SharedCache(nn.Module):
    """Two layers share one cache tensor through plain attributes: one writes it, the other reads it (the
    golden's copy must keep it shared)."""

    def __init__(self):
        super().__init__()
        cache = torch.zeros(8, 5)
        self.a, self.b = nn.Linear(5, 5), nn.Linear(5, 5)
        self.a.cache = cache
        self.b.cache = cache

    def forward(self, x):
        self.a.cache.copy_(self.a(x))
        return self.b(self.b.cache)


class NoParamCache(nn.Module):
    """No parameter, buffer or attribute before the first call, which makes the cache."""

    def forward(self, x):
        k = torch.tanh(x) * 2
        prev = getattr(self, "k_cache", None)
        self.k_cache = k
        return k if prev is None else k + prev


class FillsVacantSlots(nn.Module):
    """A rotary-style cache that starts as None and a list that collects features: filled by each call."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.cos_cached = None
        self.features = []

    def forward(self, x):
        if self.cos_cached is None:
            self.cos_cached = torch.cos(torch.arange(8.0, device=x.device))
        h = self.lin(x) * self.cos_cached
        self.features.append(h)
        return h + len(self.features)


class EagerOnlyState(nn.Module):
    """Keeps its last attention map outside compilation only (debug storage)."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8)

    def forward(self, x):
        a = (self.q(x) @ x.T).softmax(-1)
        if not torch.compiler.is_compiling():
            self.last_attn = a
        return a @ x


def shared_cache():
    return Case(SharedCache(), (torch.randn(8, 5),), "shared_cache")


def no_param_cache():
    return Case(NoParamCache(), (torch.randn(64, 8),), "no_param_cache")


def fills_vacant_slots():
    return Case(FillsVacantSlots(), (torch.randn(4, 8),), "fills_vacant_slots")


def eager_only_state():
    return Case(EagerOnlyState(), (torch.randn(6, 8),), "eager_only_state")


class _Cache:
    """A cache class kept on a module, as transformers' DynamicCache can be."""

    def __init__(self):
        self.keys = torch.zeros(4, 8)


class HoldsCacheObject(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.cache = _Cache()

    def forward(self, x):
        return self.lin(x) + self.cache.keys


def holds_cache_object():
    return Case(HoldsCacheObject(), (torch.randn(4, 8),), "holds_cache_object")


class CancelsWhenRolled(nn.Module):
    """Each row's sum skips positions 0 and 2, where the input holds +L and -L: on the first inputs eager sums
    small values, on the inputs rolled by one the two large ones meet the weights and cancel, so eager's own
    error there is ~ulp(L), hundreds of times its error on the first inputs, while the result stays as large."""

    def __init__(self, n: int = 16):
        super().__init__()
        w = torch.ones(n)
        w[[0, 2]] = 0.0
        self.register_buffer("w", w)

    def forward(self, x):
        return (x * self.w).sum(-1)


def cancels_when_rolled():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=gen)
    x[:, 0], x[:, 2] = 3e4, -3e4
    return (CancelsWhenRolled(), (x,))



class RoutedDense(nn.Module):
    """Each row keeps its two largest features, then mixes them back into every feature (a router and its
    expert's output projection): every output element depends on the choice. `split`: a graph break between
    the projection and the top-k, so that the second graph decides on the first graph's output and a wrong
    first graph moves compiled's choices beyond any near-tie."""

    def __init__(self, split: bool = False):
        super().__init__()
        self.proj, self.out, self.split = nn.Linear(32, 32), nn.Linear(32, 32), split

    def forward(self, x):
        h = self.proj(x)
        if self.split:
            torch._dynamo.graph_break()
        vals, idx = h.topk(2, dim=-1)
        return self.out(torch.zeros_like(h).scatter(-1, idx, vals))


def routed_dense():
    torch.manual_seed(0)
    return (RoutedDense(), torch.randn(16, 32))


def routed_after_break():
    torch.manual_seed(0)
    return (RoutedDense(split=True), torch.randn(16, 32))


def routed_dense_tall():
    """512 rows: in bf16 some rows' second and third features are tied within rounding."""
    torch.manual_seed(0)
    return (RoutedDense(), torch.randn(512, 32))


@torch._dynamo.disable
def _relu_outside_the_graph(h):
    return torch.relu(h)


class ReluOutsideGraph(nn.Module):
    """Two relus, one of them in a function dynamo does not compile: eager decides once more than compiled's
    graphs (their choices cannot be lined up)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return self.b(_relu_outside_the_graph(torch.relu(self.a(x))) * 2)


def relu_outside_graph():
    torch.manual_seed(0)
    return (ReluOutsideGraph(), torch.randn(64, 16))


class PooledTokens(nn.Module):
    """Tied embeddings, a relu MLP and a max over the sequence (found by a red team, 2026-12-07): rolling the
    token ids permutes the sequence, so the exact result does not move, but in bf16 features of different
    tokens tie inside the max and eager breaks the ties by position, so its gradients move by O(1)."""

    def __init__(self, vocab: int = 100, width: int = 32):
        super().__init__()
        self.emb, self.fc = nn.Embedding(vocab, width), nn.Linear(width, width)

    def forward(self, ids):
        h = self.emb(ids)
        h = h + torch.relu(self.fc(h))
        return h.max(dim=1).values @ self.emb.weight.t()


def pooled_tokens():
    torch.manual_seed(0)
    return (PooledTokens(), torch.randint(0, 100, (4, 16)))


class SortedInputOnly(nn.Module):
    """Refuses an input whose rows are not sorted (as a model validating its positions would): the rolled inputs
    are refused by eager and compiled alike, so the probe on them does not apply."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 8)

    def forward(self, x):
        if not bool((x[..., 1:] >= x[..., :-1]).all()):
            raise ValueError("rows must be sorted")
        return self.lin(x)


def sorted_input_only():
    torch.manual_seed(0)
    return (SortedInputOnly(), (torch.randn(4, 16).sort(-1).values,))


class NormResidual(nn.Module):
    """A residual MLP closed by a layer norm over unit-variance activations: a wrong epsilon there is a systematic
    scale of the output and of every gradient through it."""

    def __init__(self, d: int = 64):
        super().__init__()
        self.a, self.b, self.ln = nn.Linear(d, 4 * d), nn.Linear(4 * d, d), nn.LayerNorm(d)

    def forward(self, x):
        return self.ln(x + self.b(nn.functional.gelu(self.a(x))))


def norm_residual():
    torch.manual_seed(0)
    return (NormResidual(), (torch.randn(4, 24, 64),))


class NormThenLinear(nn.Module):
    """A layer norm, then a linear: the norm's input gradient is three terms that cancel (dy, its mean, and x-hat
    times mean(dy x-hat)), so eager's bf16 noise differs from element to element far more than the values do."""

    def __init__(self, d: int = 256):
        super().__init__()
        self.ln, self.fc = nn.LayerNorm(d), nn.Linear(d, d)

    def forward(self, x):
        return self.fc(self.ln(x))


def norm_then_linear():
    torch.manual_seed(0)
    return (NormThenLinear(), (torch.randn(32, 256, requires_grad=True),))


class CenteredWideRows(nn.Module):
    """Rows of 8,192 values near 300, centred by their mean: the mean's one rounding (an ulp of 300 is 3e-5) is
    subtracted from every element of its row, so the error's mean is four draws (one per row), not 32,768
    (a red team's false FAIL of the offset check, 2026-12-07)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 8192)

    def forward(self, x):
        y = self.fc(x) + 300.0
        return y - y.mean(-1, keepdim=True)


def centered_wide_rows():
    torch.manual_seed(0)
    return (CenteredWideRows(), (torch.randn(4, 64),))


class WideMLP(nn.Module):
    """Linear 256 -> 1024, GELU, Linear 1024 -> 256: weight gradients of 262,144 elements, whose largest is alone in
    its octave of |golden| (one wrong element there barely moves the RMSE)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(256, 1024), nn.Linear(1024, 256)

    def forward(self, x):
        return self.fc2(nn.functional.gelu(self.fc1(x)))


def wide_mlp():
    torch.manual_seed(0)
    return (WideMLP(), (torch.randn(64, 256),))
