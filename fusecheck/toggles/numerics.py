"""Inductor's own numerics knobs (torch 2.13's names), as toggles: each patches one config key, and a torch
without that key answers "not supported by this torch" (ToggleUnsupported) instead of ignoring it.

Names follow torch's keys, so `fusecheck toggles` reads like torch/_inductor/config.py. A knob that is on by
default is offered as `<key>.off`: a toggle always does what its name says.
"""
from __future__ import annotations

import operator

import torch

from .appliers import always, config_patches, low_precision, on_triton, training
from .promises import BATCH_INVARIANT, RUN_TO_RUN
from .toggle import Toggle

_DIVISIONS = frozenset({"div", "div_", "true_divide", "reciprocal", "rsqrt", "truediv", "floor_divide"})


def _divides(gm: torch.fx.GraphModule) -> bool | str:
    for node in gm.graph.nodes:
        target = node.target
        name = getattr(target, "__name__", str(target)).split(".")[0]
        if target in (operator.truediv, operator.itruediv) or name in _DIVISIONS:
            return True
    return "not applicable: no division in the graph"


def _train_low_precision(gm: torch.fx.GraphModule) -> bool | str:
    why = training(gm)
    return low_precision(gm) if why is True else why


ENTRIES = [
    Toggle(
        "eager_numerics.division_rounding",
        "x / y rounded as eager rounds it (Triton's div_rn instead of the approximate div.full); "
        "Triton only: C++ (CPU) code already divides exactly",
        "eager_numerics.division_rounding=True",
        config_patches("eager_numerics.division_rounding", {"eager_numerics.division_rounding": True}),
        on_triton(_divides),
    ),
    Toggle(
        "eager_numerics.disable_ftz",
        "fp32 denormals kept, not flushed to zero, in generated Triton kernels (eager keeps them)",
        "eager_numerics.disable_ftz=True",
        config_patches("eager_numerics.disable_ftz", {"eager_numerics.disable_ftz": True}),
        on_triton(),
    ),
    Toggle(
        "eager_numerics.use_pytorch_libdevice",
        "Triton kernels call the CUDA toolkit's libdevice (as eager does) instead of Triton's bundled one "
        "(1-ULP differences in erf, pow, ...)",
        "eager_numerics.use_pytorch_libdevice=True",
        config_patches("eager_numerics.use_pytorch_libdevice", {"eager_numerics.use_pytorch_libdevice": True}),
        on_triton(),
    ),
    Toggle(
        "emulate_precision_casts_on_saved_tensors.off",
        "saved fp16/bf16 pointwise results are NOT rounded where forward and backward share them (Inductor's "
        "default since 2.13 rounds them): shows what that default changes",
        "emulate_precision_casts_on_saved_tensors=False",
        config_patches("emulate_precision_casts_on_saved_tensors.off",
                       {"emulate_precision_casts_on_saved_tensors": False}),
        _train_low_precision,
        training_only=True,
    ),
    Toggle(
        "deterministic",
        "Inductor's deterministic mode: no on-device benchmarking whose choice changes the numbers; promises "
        "the same bits run to run",
        "deterministic=True",
        config_patches("deterministic", {"deterministic": True}),
        always,
        promises=(RUN_TO_RUN,),
    ),
    Toggle(
        "batch_invariant",
        "Inductor's batch-invariant mode (implies deterministic): a row's result does not depend on the batch "
        "it is computed in; read by Triton codegen",
        "batch_invariant=True",
        config_patches("batch_invariant", {"batch_invariant": True}),
        always,
        promises=(RUN_TO_RUN, BATCH_INVARIANT),
    ),
]
