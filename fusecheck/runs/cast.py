"""Preparing a case for a run, and the high-precision golden: the same model and inputs upcast.

The golden copies the model *after* it was cast to the run dtype, so it uses the same (rounded) weights
and inputs and differs from eager only in arithmetic precision.
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fusecheck.case import Case
from fusecheck.runs.attributes import cast_attributes


COMPLEX_OF = {torch.float64: torch.complex128, torch.float32: torch.complex64}


def cast_tree(tree: Any, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> Any:
    """Cast floating tensors of a pytree to `dtype` and move all tensors to `device`."""
    return pytree.tree_map(lambda x: _cast_tensor(x, dtype, device) if isinstance(x, torch.Tensor) else x, tree)


def _cast_tensor(t: torch.Tensor, dtype: torch.dtype | None, device) -> torch.Tensor:
    """A floating tensor to `dtype`; a complex one to the complex dtype of that precision (complex128 for the
    fp64 golden), or kept where there is none (bf16); anything else only moved."""
    if dtype is not None and t.is_floating_point():
        return t.to(device=device, dtype=dtype)
    if dtype is not None and t.is_complex():
        return t.to(device=device, dtype=COMPLEX_OF.get(dtype, t.dtype))
    return t.to(device=device) if device is not None else t


def cast_model(model: Any, dtype: torch.dtype | None, device: str | torch.device | None) -> Any:
    """`Module.to(dtype)` casts complex buffers to a real dtype, dropping their imaginary part (a RoPE
    `freqs_cis` buffer): the golden then computed another function. Each tensor is cast by its kind instead,
    plain tensor attributes (module state outside the buffers) with the buffers."""
    if isinstance(model, torch.nn.Module):
        model = model._apply(lambda t: _cast_tensor(t, dtype, device))
        cast_attributes(model, lambda t: _cast_tensor(t, dtype, device))
    return model


def prepare_case(case: Case, dtype: torch.dtype | None, device: str) -> Case:
    """Cast model and floating inputs to the run dtype, move to the device, eval mode (no dropout)."""
    model = cast_model(case.model, dtype, device)
    if isinstance(model, torch.nn.Module):
        model.eval()
    return Case(model, cast_tree(case.inputs, dtype, device), case.name, cast_tree(case.kwargs, dtype, device))


def golden_case(case: Case, golden_dtype: torch.dtype, device: torch.device | str | None = None) -> Case:
    """Deep copy of an already prepared case, upcast to `golden_dtype` (fp64, or fp32 without fp64), on
    `device` (default: where the case is)."""
    model = case.model
    if isinstance(model, torch.nn.Module):
        model = cast_model(copy.deepcopy(model), golden_dtype, device)
    return Case(model, cast_tree(case.inputs, golden_dtype, device), case.name,
                cast_tree(case.kwargs, golden_dtype, device))
