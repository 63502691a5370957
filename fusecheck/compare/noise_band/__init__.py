"""A per-element noise band for the max-type checks, measured from the computation itself (issue 27).

Why. The max-type checks (per-octave MaxRel, small-value MaxAbs) exist to catch a few wrong elements where
eager is accurate. But whether eager "is accurate" at an element depends on how the element was computed,
not on its value: a qkv-bias or position-embedding gradient is a sum with heavy cancellation (the key part of
a qkv-bias gradient is exactly zero in exact arithmetic), so an element's rounding error is set by the size
of the terms that cancelled. Eager can be lucky on 46 elements where compiled is not, and the per-octave rule
fails a correct compile (GPT-2/ViT configs, bf16 `--train`, 3 of 12 seeds, compiled RMSE 0.88-1.08x eager's).

1. The band, measured (`eager_spread`). K extra eager runs under randomised rounding -- Monte Carlo
   arithmetic (Verificarlo, CADNA) emulated at op level by a TorchDispatchMode (`RandomRounding`), active in
   forward and in autograd's backward:
   * random rounding: after every op whose floating output is fp16/bf16/fp32 (and that is not exact: data
     movement, copies, selections, sign/abs/relu/max..., upcasts), each output element moves to its lower or
     upper neighbour in its own format with probability 1/8 each (`flip`). That is the distribution of
     stochastic rounding of the exact result (Verificarlo's "random rounding" at the working precision: the
     exact value is uniform in the half-ulp around the rounded one, and SR rounds it away from the nearest
     with probability equal to its distance, 1/8 on average on each side), emulated from the rounded output
     alone: the direction is random because the exact value is not known. A compiler that fuses (keeps an
     intermediate in fp32), contracts an FMA or rounds in another order changes exactly these last bits.
   * reassociation: fp32 reductions are run in a random order of their reduced index (mm/addmm/bmm/baddbmm:
     the contraction index of both operands permuted alike; sum/mean: the reduced dims permuted). A GEMM
     accumulates each output in sequence along K, so a permuted K is an independent draw of the same
     accumulation error -- which is what a compiled kernel with another split/tiling makes. Output rounding
     alone would miss it in fp32 (an fp32 K=4096 dot product accumulates ~45 u of error, its output rounding
     is 0.5 u). bf16/fp16 reductions accumulate in fp32 on CPU and GPU: their order moves the result far
     less than one output ulp, so they are not permuted (the copy would cost and buy nothing). The
     reductions are the ones whose result does not depend on the order (sum, mean, var/std and their
     _mean forms, logsumexp, vector norms), each over its schema's `dim`.
   * composite ops (layer/group/batch norm, softmax and log-softmax, their backwards, losses, embedding
     backward: the non-pointwise entries of Inductor's decomposition table) run as that decomposition, in the
     reference run and in every perturbed run, so that the roundings and reductions inside them are
     perturbed and reassociated too: a row mean's rounding error moves a whole row alike, which no flip of
     the output imitates, and a compiler runs exactly this decomposition, fused, in its own order.
     Convolution and SDPA have no decomposition there and keep output rounding only.
   * discrete decisions (topk/sort/argmax/argmin/max.dim/min.dim indices, max_pool2d's argmax, relu's and
     hardtanh's masks in forward and backward, and any other op that makes integers or bools from floats or
     rounds floats to integers: casts to an index, comparisons, bucketize, floor/ceil/round/trunc) are pinned
     to the unperturbed run's choices (recorded in one reference run under the same mode, replayed in order),
     so the spread is rounding noise and never an O(1) routing change; their values are taken from the
     perturbed input at eager's choice.
   * own generators (one per device, seeded from `seed` and the run index): the process's RNG never moves.
   The spread of an element is max over the K runs of |perturbed - eager|.
   `how="inputs"` is the alternative asked for in the issue: only the floating inputs and parameters are
   moved by one ulp at random (probability 1/2), no op is touched; it measures conditioning, not rounding.
   Measured on 24 stock-Inductor GPT-2/ViT bf16 runs, it gives about the same c (median 1.0-1.6 per run,
   like "ops"): the inputs' last bits reach the same cancellations. It misses what only op-level rounding
   has (fp32 accumulation, an intermediate rounded where the inputs are exact) and needs every parameter
   in the state snapshot, so "ops" is the default.

2. The rule (`judge_band`). band_i = max(|eager_i - golden_i|, spread_i, u |golden_i|, tiny), u the unit
   roundoff of the dtype (no correct run is held to less than its own rounding) and `tiny` the smallest
   normal number (below it a difference is a flush-to-zero choice, not accuracy; this is also the floor of
   an exact zero). No atol: the band is relative to each element's own computation, so multiplying every
   tensor by a power of two changes no z (tested); a tensor of values far below 1 is judged like one at 1.
   z_i = |compiled_i - golden_i| / band_i.

   Null model (what a correct compile gives). Element i has an unknown noise scale s_i (any value, element
   by element: that is the point). Eager's error is one draw, |e_i| ~ s_i |N|; each perturbed run is a draw of
   scale c s_i, so spread_i ~ c s_i max of K |N|; compiled, a correct computation up to `ratio` r = 2 times
   noisier (the RMSE ratio the policy allows), has error ~ r s_i |N|; all independent to first order (the
   perturbations are random, compiled's roundings are its own). Then z_i's tail does not depend on s_i:
       p0(T) = P(r|N| > T max(|N_0|, c|N_1|, ..., c|N_K|))
             = int_0^inf f_{r|N|}(x) erf(x / (T sqrt 2)) erf(x / (c T sqrt 2))^K dx   ~  A (r/T)^(K+1) / c^K,
   computed by quadrature (`null_tail`). The floors only lower z, so p0 bounds the tail from above. c is the
   scale of a perturbed run's difference from eager relative to eager's own error: ~sqrt(2..3) where the
   perturbation covers eager's noise sources (stochastic vs nearest rounding: variance ulp^2/4 against
   ulp^2/12; a reassociated sum: two independent accumulation errors). It is *measured* on each tensor
   (`Spread.calibration`): elements whose first perturbed run moved them by >= 2 ulps (their noise is
   resolved, not one rounding step) are selected, and median(max of the other K-1 runs / |e_i|) is c times
   median(max of K-1 |N| / |N|) -- the selection saw neither numerator nor denominator, so it is unbiased;
   its lower 1e-3 confidence bound is used, never above sqrt(3) (the largest the model predicts), and
   `DEFAULT_C` = 1 when fewer than `MIN_CALIBRATION` elements qualify. (Without the pair, elements are
   selected by |e_i| >= 1 ulp, which biases c low: safe, less power.) Measured: c = 1.5-1.73 in bf16 and
   1.1-1.3 in fp32 on the tests' attention block. A perturbation that misses a noise source gives a smaller c
   and with it a heavier tail: the test adapts instead of alarming.

   Significance over elements. For a ladder of thresholds T_j = 2, 2 sqrt 2, 4, ..., 2^30, the count of
   elements with z > T_j is checked against Binomial(n, p0(T_j)); the row fails when any count reaches
   P(X >= k) < alpha / L (Bonferroni over the L rungs; alpha 1e-5 by default, as `max_rel_alpha`). So
   (a) many elements slightly above band (a systematic error) fail on a low rung, (b) a handful far above it
   fail on a high rung, (c) a lone element fails when n p0(z) < alpha / L, (d) a correct computation of any
   size stays quiet at rate <= alpha. The margin is the largest count / limit over the rungs (limit: halfway
   between the largest passing and the smallest failing count; > 1 fails).

Power, measured (tests/compare/test_noise_band.py; K = 4, alpha 1e-5): a sign flip on 3-8 small values of a
wide-range tensor fails in fp32 and bf16; one fp32 element 10% (or 0.1%) off where eager rounds correctly
fails; a 3x-noisier computation fails from ~3000 elements (at 512-1024 it is at the edge: the RMSE check is
the one for systematic errors). What it gives up: in bf16 a 10% error is only 13-26 ulps, which a 2x-noisier
correct run reaches at an element whose K + 1 draws all came out small (p0(16) ~ 2e-5 at K = 4), so at
n = 512-4096 it takes 8 such elements at K = 4, 3 at K = 8 (and one at K = 8 when 25% off); the per-octave
rule catches a lone one, because it assumes an octave's elements share one noise scale -- the very
assumption that fails on cancellation gradients. `octave_reference` is the middle road: the per-octave
rule with the band's per-octave maxima as eager's error (it passes issue 27's ViT flap and keeps the lone
element at n = 512, not at 4096+).

Cost, measured on CPU (2 shared cores): a perturbed run is 2.4-6x an eager run (the Python dispatch per op
and one random byte per element of each inexact output; fp32 reassociation adds copies), the reference run
1.1-2x; K = 4 in all costs 10-27 eager runs, less for larger models.

Interface (for the integration): `eager_spread(...) -> Spread` (a dict name -> spread tensor, with `.runs`
and `.calibration(name)`), `judge_band(compiled, eager, golden, spread[name], runs=spread.runs,
calibration=spread.calibration(name), ...) -> BandResult(passed, message, stats, margin)`.
"""
from __future__ import annotations

from fusecheck.compare.noise_band.judge import BAND_KEYS, BandResult, band_surrogate, judge_band, octave_reference, unit_roundoff
from fusecheck.compare.noise_band.null_model import (LADDER, binom_sf, median_max_ratio, null_tail,
                                                     smallest_failing_count)
from fusecheck.compare.noise_band.rounding import DECISION_OPS, EXACT_OPS, PERTURBED_DTYPES, RandomRounding, flip_last_bits
from fusecheck.compare.noise_band.spread import Spread, eager_spread

__all__ = ["BAND_KEYS", "BandResult", "DECISION_OPS", "EXACT_OPS", "LADDER", "PERTURBED_DTYPES", "RandomRounding",
           "Spread", "band_surrogate", "binom_sf", "eager_spread", "flip_last_bits", "judge_band", "median_max_ratio",
           "null_tail", "octave_reference", "smallest_failing_count", "unit_roundoff"]
